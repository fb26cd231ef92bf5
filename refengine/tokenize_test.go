package refengine

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ttftlens/ttftlens/refengine/model"
)

// TestChatPromptTokens: the tokens ChatPromptTokens gives are the prompt the
// engine computes: as many as the usage counts, and a second request that
// shares the first's system message but not its question is served from
// the prefix cache exactly the full blocks the two token lists share.
func TestChatPromptTokens(t *testing.T) {
	e := startEngine(t, testConfig())
	system := "You are the assistant of a shop. Answer in one short sentence, and be polite to every customer. "
	first := `[{"role":"system","content":` + quote(system) + `},{"role":"user","content":"Where is my order?"}]`
	second := `[{"role":"system","content":` + quote(system) + `},{"role":"user","content":"Can I return a lamp?"}]`
	var toks [2][]int
	var us [2]usage
	for i, msgs := range []string{first, second} {
		var err error
		if toks[i], err = e.ChatPromptTokens([]byte(msgs)); err != nil {
			t.Fatal(err)
		}
		resp := e.post(t, context.Background(), "/v1/chat/completions", `{"model":"ttftlens-ref","max_tokens":1,"messages":`+msgs+`}`)
		var out struct{ Usage usage }
		if err := json.Unmarshal(readAll(t, resp.Body), &out); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		us[i] = out.Usage
		if len(toks[i]) != us[i].PromptTokens {
			t.Errorf("request %d: ChatPromptTokens gives %d tokens, the engine computed %d", i, len(toks[i]), us[i].PromptTokens)
		}
	}
	shared := 0
	for shared < len(toks[0]) && shared < len(toks[1]) && toks[0][shared] == toks[1][shared] {
		shared++
	}
	if want := shared / model.BlockSize * model.BlockSize; us[1].PromptTokensDetails.CachedTokens != want || want == 0 {
		t.Errorf("second request cached %d tokens; the two prompts share %d tokens, %d in full blocks", us[1].PromptTokensDetails.CachedTokens, shared, want)
	}
	if _, err := e.ChatPromptTokens([]byte(`[{"role":"user","content":[{"type":"image_url","image_url":"http://x/y.png"}]}]`)); err == nil {
		t.Error("an image part: no error")
	}
	if _, err := e.ChatPromptTokens([]byte(`{"role":"user"}`)); err == nil {
		t.Error("messages not a list: no error")
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
