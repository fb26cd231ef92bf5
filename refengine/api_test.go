package refengine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestOpenAIErrors(t *testing.T) {
	e := startEngine(t, testConfig())
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + closed.Addr().String() + "/img.png"
	closed.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	img := func(url string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	}
	tests := []struct {
		name, path, body, fault string
		status                  int
		param, code, msg        string
	}{
		{"n=2", "/v1/chat/completions", chatBody("hi", `"n":2`), "", 400, "n", "", "n=1"},
		{"temperature", "/v1/chat/completions", chatBody("hi", `"temperature":3`), "", 400, "temperature", "", "temperature"},
		{"top_p", "/v1/chat/completions", chatBody("hi", `"top_p":0`), "", 400, "top_p", "", "top_p"},
		{"max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":0}`, "", 400, "max_tokens", "", "max_tokens"},
		{"too many tokens", "/v1/completions", `{"prompt":"x","max_tokens":100000}`, "", 400, "max_tokens", "", "context length"},
		{"stop type", "/v1/completions", `{"prompt":"x","stop":5}`, "", 400, "stop", "", "stop"},
		{"stream_options", "/v1/completions", `{"prompt":"x","stream_options":{"include_usage":true}}`, "", 400, "stream_options", "", "stream"},
		{"bad json", "/v1/chat/completions", `{"messages":`, "", 400, "", "", "JSON"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, "", 400, "messages", "", "messages"},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, "", 400, "messages[0].role", "", "role"},
		{"bad part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"audio"}]}]}`, "", 400, "", "", "audio"},
		{"no prompt", "/v1/completions", `{"max_tokens":3}`, "", 400, "prompt", "", "prompt"},
		{"token out of vocab", "/v1/completions", `{"prompt":[1,999999]}`, "", 400, "prompt", "", "vocabulary"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, "", 404, "model", "model_not_found", "gpt-9"},
		{"bad fault", "/v1/chat/completions", chatBody("hi", ""), "explode=1", 400, FaultHeader, "", "explode"},
		{"long prompt over context", "/v1/chat/completions", chatBody("hi", ""), "long_prompt=5000", 400, "messages", "", "context length"},
		{"injected 500", "/v1/chat/completions", chatBody("hi", `"stream":true`), "http_error=500", 500, "", "", "injected"},
		{"image bad scheme", "/v1/chat/completions", img("ftp://example.com/x.png"), "", 400, "messages", "", "image_url"},
		{"image unreachable", "/v1/chat/completions", img(deadURL), "", 400, "messages", "", "failed to fetch"},
		{"image 404", "/v1/chat/completions", img(notFound.URL + "/x.png"), "", 400, "messages", "", "status 404"},
		{"image bad data url", "/v1/chat/completions", img("data:image/png;base64,!!!"), "", 400, "messages", "", "data: URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.fault != "" {
				hdr = []string{FaultHeader, tc.fault}
			}
			resp := e.post(t, context.Background(), tc.path, tc.body, hdr...)
			b := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			var raw map[string]map[string]any
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			ev, ok := raw["error"]
			if !ok {
				t.Fatalf("no error object: %s", b)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := ev[k]; !ok {
					t.Errorf("error lacks %q: %s", k, b)
				}
			}
			msg, _ := ev["message"].(string)
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q lacks %q", msg, tc.msg)
			}
			if p, _ := ev["param"].(string); p != tc.param {
				t.Errorf("param %q, want %q", p, tc.param)
			}
			if tc.code != "" && ev["code"] != tc.code {
				t.Errorf("code %v, want %q", ev["code"], tc.code)
			}
		})
	}
}

func TestMediaFetch(t *testing.T) {
	cfg := testConfig()
	cfg.MediaMaxBytes = 1000
	e := startEngine(t, cfg)
	imgSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(80 * time.Millisecond)
		if r.URL.Path == "/big.png" {
			w.Write(make([]byte, 5000))
			return
		}
		w.Write([]byte("\x89PNG fake image bytes"))
	}))
	defer imgSrv.Close()
	defer imgSrv.Client().CloseIdleConnections()
	body := func(url string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"describe"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}],"max_tokens":2}`
	}
	run := func(id, b string) (int, Truth) {
		resp := e.post(t, context.Background(), "/v1/chat/completions", b, "X-Request-Id", id)
		readAll(t, resp.Body)
		resp.Body.Close()
		tr, _ := e.Truth(id)
		return resp.StatusCode, tr
	}
	_, plain := run("m-plain", `{"messages":[{"role":"user","content":[{"type":"text","text":"describe"}]}],"max_tokens":2}`)
	code, web := run("m-http", body(imgSrv.URL+"/cat.png"))
	if code != 200 || web.Media < 80*time.Millisecond || web.PromptTokens < plain.PromptTokens+cfg.ImageTokens-4 {
		t.Errorf("http image: status %d, media %v, prompt %d (plain %d)", code, web.Media, web.PromptTokens, plain.PromptTokens)
	}
	data := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("tiny image"))
	code, inline := run("m-data", body(data))
	if code != 200 || inline.PromptTokens != web.PromptTokens || inline.Media >= web.Media {
		t.Errorf("data image: status %d, media %v, prompt %d", code, inline.Media, inline.PromptTokens)
	}
	if code, _ := run("m-big", body(imgSrv.URL+"/big.png")); code != 400 {
		t.Errorf("oversized image: status %d", code)
	}
	if plain.Media >= web.Media {
		t.Errorf("media without images %v, with a fetched one %v", plain.Media, web.Media)
	}
}

func TestChatTemplateAndStop(t *testing.T) {
	parts := renderChat([]chatMessage{
		{Role: "system", parts: []contentPart{{text: "be brief"}}},
		{Role: "user", parts: []contentPart{{text: "hi"}, {image: []byte("x")}, {text: "there"}}},
	})
	if len(parts) != 3 || parts[0].text != "<|system|>\nbe brief\n<|user|>\nhi" || parts[1].image == nil || parts[2].text != "there\n<|assistant|>\n" {
		t.Errorf("renderChat = %+v", parts)
	}
	// A stop string ends the stream with finish_reason stop and is not sent.
	e := startEngine(t, testConfig())
	resp := e.post(t, context.Background(), "/v1/completions", `{"prompt":"hello","max_tokens":30,"temperature":0,"ignore_eos":true}`)
	var full struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	json.Unmarshal(readAll(t, resp.Body), &full)
	resp.Body.Close()
	text := full.Choices[0].Text
	if len(text) < 6 {
		t.Skipf("generated text too short to pick a stop string: %q", text)
	}
	stop := text[3:6]
	sb, _ := json.Marshal(stop)
	resp = e.post(t, context.Background(), "/v1/completions", `{"prompt":"hello","max_tokens":30,"temperature":0,"ignore_eos":true,"stream":true,"stop":[`+string(sb)+`]}`)
	items, err := readSSE(resp.Body, time.Now())
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	finish := ""
	for _, it := range items {
		if it.comment || it.data == "[DONE]" {
			continue
		}
		c := mustChunk(t, it.data)
		got.WriteString(*c.Choices[0].Text)
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	want := text[:strings.Index(text, stop)]
	if got.String() != want || finish != "stop" {
		t.Errorf("with stop %q: got %q (%s), want %q", stop, got.String(), finish, want)
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "nl\n\r\t\x01", "<a&b>", "é漢字🙂", "bad\xffutf8", "\u2028\u2029"} {
		b := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if back != want {
			t.Errorf("%q -> %s -> %q", s, b, back)
		}
	}
}

func TestRequestID(t *testing.T) {
	if requestID("abc-123") != "abc-123" {
		t.Error("valid id not kept")
	}
	for _, bad := range []string{"", "has space", strings.Repeat("x", 200), "tab\t"} {
		if id := requestID(bad); id == bad || len(id) != 32 {
			t.Errorf("requestID(%q) = %q", bad, id)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		chatBody("hi", `"stream":true,"stream_options":{"include_usage":true},"stop":["a","b"],"max_tokens":3`),
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:,abc"}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x/y.png"}]}]}`,
		`{"prompt":[1,2,3],"temperature":0.5,"top_p":0.9,"seed":-4,"n":1}`,
		`{"prompt":[[1,2]],"stop":"\n"}`,
		`{"prompt":["one"],"max_completion_tokens":4}`,
		`{"messages":null}`, `[]`, `{"prompt":{}}`, ``,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := decodeRequest(body, chat)
		if err != nil {
			if r != nil || err.status != 400 || err.msg == "" {
				t.Fatalf("error %+v with request %v", err, r)
			}
			b := err.appendJSON(nil)
			if !json.Valid(b) {
				t.Fatalf("error JSON invalid: %s", b)
			}
			return
		}
		if r.temperature < 0 || r.temperature > 2 || r.topP <= 0 || r.topP > 1 || r.maxTokens < 0 || len(r.stop) > maxStops {
			t.Fatalf("invalid request accepted: %+v", r)
		}
		if chat && len(r.messages) == 0 {
			t.Fatal("chat without messages accepted")
		}
		if !chat && r.promptIDs == nil && r.prompt == "" && !strings.Contains(string(body), `"prompt"`) {
			t.Fatal("completion without prompt accepted")
		}
		if r.includeUsage && !r.stream {
			t.Fatal("include_usage without stream")
		}
	})
}

func FuzzParseFaults(f *testing.F) {
	for _, seed := range []string{
		"", "queue_delay=200ms,slow_tokenizer=50ms", "straggler=1:2ms", "stall=3:1s", "buffered,hold_headers,keep_decoding",
		"reset_after=2", "close_after=0", "http_error=503", "error_after=4", "content_filter", "content_filter=3",
		"long_prompt=100", "slow_prefill=2", "slow_prefill=1.5", "slow_prefill=0.5", "ignore_disconnect=8", "buffered=false", " slow_media = 1s , ", "unknown", "queue_delay=-1s", "http_error=404",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := ParseFaults(s)
		if err != nil {
			return
		}
		again, err := ParseFaults(fs.String())
		if err != nil {
			t.Fatalf("String() %q does not parse: %v", fs.String(), err)
		}
		if again != fs {
			t.Fatalf("round trip: %q -> %+v -> %q -> %+v", s, fs, fs.String(), again)
		}
	})
}
