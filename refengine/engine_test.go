package refengine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStreamShapeChat(t *testing.T) {
	e := startEngine(t, testConfig())
	start := time.Now()
	resp := e.post(t, context.Background(), "/v1/chat/completions",
		chatBody("Tell me a story about a cat.", `"stream":true,"max_tokens":12,"temperature":0,"stream_options":{"include_usage":true}`),
		"X-Request-Id", "req-shape-1", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
	}
	if got := resp.Header.Get("X-Request-Id"); got != "req-shape-1" {
		t.Errorf("X-Request-Id = %q", got)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type = %q", ct)
	}
	items, err := readSSE(resp.Body, start)
	if err != nil {
		t.Fatal(err)
	}
	// role chunk, server-timing comment, content..., finish, usage, [DONE]
	if len(items) < 5 {
		t.Fatalf("too few items: %+v", items)
	}
	role := mustChunk(t, items[0].data)
	if role.Object != "chat.completion.chunk" || len(role.Choices) != 1 || role.Choices[0].Delta == nil ||
		role.Choices[0].Delta.Role == nil || *role.Choices[0].Delta.Role != "assistant" ||
		role.Choices[0].Delta.Content == nil || *role.Choices[0].Delta.Content != "" || role.Choices[0].FinishReason != nil {
		t.Errorf("role chunk = %s", items[0].data)
	}
	if role.ID != "chatcmpl-req-shape-1" || role.Model != "ttftlens-ref" {
		t.Errorf("role chunk id/model = %s", items[0].data)
	}
	if !items[1].comment || !strings.HasPrefix(items[1].data, "server-timing ") {
		t.Fatalf("item 1 = %+v, want the server-timing comment", items[1])
	}
	st := parseServerTiming(t, strings.TrimPrefix(items[1].data, "server-timing "))
	for _, name := range []string{"queue", "tokenize", "media", "prefill", "sync", "decode1", "recv", "emit"} {
		if _, ok := st[name]; !ok {
			t.Errorf("server-timing lacks %s: %s", name, items[1].data)
		}
	}
	first := items[2]
	c := mustChunk(t, first.data)
	if c.Choices[0].Delta == nil || c.Choices[0].Delta.Content == nil || c.Choices[0].Delta.Role != nil {
		t.Fatalf("first content chunk = %s", first.data)
	}
	sum := st["recv"] + st["queue"] + st["tokenize"] + st["media"] + st["prefill"] + st["decode1"] + st["emit"]
	if sum > first.at {
		t.Errorf("server-timing parts %v add up to more than the client's TTFT %v", sum, first.at)
	}
	if st["sync"] > st["prefill"] {
		t.Errorf("sync %v > prefill %v", st["sync"], st["prefill"])
	}
	n := len(items)
	if items[n-1].data != "[DONE]" {
		t.Errorf("last item = %q", items[n-1].data)
	}
	u := mustChunk(t, items[n-2].data)
	if u.Usage == nil || len(u.Choices) != 0 || !strings.Contains(items[n-2].data, `"choices":[]`) {
		t.Fatalf("usage chunk = %s", items[n-2].data)
	}
	fin := mustChunk(t, items[n-3].data)
	if fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason == "" {
		t.Fatalf("finish chunk = %s", items[n-3].data)
	}
	var text strings.Builder
	contents := 0
	for _, it := range items[2 : n-3] {
		if it.comment {
			t.Fatalf("unexpected comment %q", it.data)
		}
		c := mustChunk(t, it.data)
		if c.Choices[0].Delta.Content == nil || c.Choices[0].FinishReason != nil {
			t.Fatalf("content chunk = %s", it.data)
		}
		text.WriteString(*c.Choices[0].Delta.Content)
		contents++
	}
	if *fin.Choices[0].FinishReason == "length" && u.Usage.CompletionTokens != 12 {
		t.Errorf("completion_tokens = %d, want 12", u.Usage.CompletionTokens)
	}
	if u.Usage.PromptTokens == 0 || u.Usage.TotalTokens != u.Usage.PromptTokens+u.Usage.CompletionTokens {
		t.Errorf("usage = %+v", *u.Usage)
	}
	tr, ok := e.Truth("req-shape-1")
	if !ok {
		t.Fatal("no truth")
	}
	if tr.Traceparent == "" || tr.FinishReason != *fin.Choices[0].FinishReason || tr.PromptTokens != u.Usage.PromptTokens {
		t.Errorf("truth = %+v", tr)
	}
	if tr.TTFT <= 0 || tr.TTFT > first.at+time.Second {
		t.Errorf("truth TTFT %v vs client %v", tr.TTFT, first.at)
	}
	t.Logf("client TTFT %v, server-timing %v, text %q (%d chunks)", first.at, st, text.String(), contents)
}

func TestStreamCompletions(t *testing.T) {
	e := startEngine(t, testConfig())
	resp := e.post(t, context.Background(), "/v1/completions",
		`{"model":"ttftlens-ref","prompt":"Once upon a time","stream":true,"max_tokens":5,"temperature":0}`)
	defer resp.Body.Close()
	items, err := readSSE(resp.Body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !items[0].comment || !strings.HasPrefix(items[0].data, "server-timing ") {
		t.Fatalf("first item %+v, want the server-timing comment", items[0])
	}
	if items[len(items)-1].data != "[DONE]" {
		t.Fatalf("no [DONE]: %+v", items)
	}
	fin := mustChunk(t, items[len(items)-2].data)
	if fin.Object != "text_completion" || fin.Choices[0].FinishReason == nil {
		t.Fatalf("finish chunk %s", items[len(items)-2].data)
	}
	for _, it := range items[1 : len(items)-2] {
		c := mustChunk(t, it.data)
		if c.Choices[0].Text == nil {
			t.Fatalf("chunk %s", it.data)
		}
	}
}

func TestNonStreamTrailer(t *testing.T) {
	e := startEngine(t, testConfig())
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := chatBody("hello there", `"max_tokens":8,"temperature":0.7,"top_p":0.9,"seed":7`)
		if path == "/v1/completions" {
			body = `{"prompt":"hello there","max_tokens":8,"seed":7}`
		}
		resp := e.post(t, context.Background(), path, body, "X-Request-Id", "ns-"+path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		if _, ok := resp.Trailer["Server-Timing"]; !ok {
			t.Errorf("%s: Server-Timing trailer not declared: %v", path, resp.Trailer)
		}
		b := readAll(t, resp.Body)
		resp.Body.Close()
		st := resp.Trailer.Get("Server-Timing")
		if st == "" {
			t.Fatalf("%s: no Server-Timing trailer", path)
		}
		timing := parseServerTiming(t, st)
		if _, emit := timing["emit"]; len(timing) != 7 || emit { // emit is a stream's
			t.Errorf("%s: trailer %q", path, st)
		}
		var out struct {
			Object  string `json:"object"`
			Choices []struct {
				Message *struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
				Text         *string `json:"text"`
				FinishReason string  `json:"finish_reason"`
			} `json:"choices"`
			Usage usage `json:"usage"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		if len(out.Choices) != 1 || out.Choices[0].FinishReason == "" || out.Usage.PromptTokens == 0 {
			t.Errorf("%s: body %s", path, b)
		}
		if path == "/v1/chat/completions" && (out.Object != "chat.completion" || out.Choices[0].Message == nil || out.Choices[0].Message.Role != "assistant") {
			t.Errorf("chat body %s", b)
		}
		if path == "/v1/completions" && (out.Object != "text_completion" || out.Choices[0].Text == nil) {
			t.Errorf("completions body %s", b)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	e := startEngine(t, testConfig())
	get := func() string {
		resp := e.post(t, context.Background(), "/v1/completions", `{"prompt":"abc","max_tokens":10,"seed":42,"temperature":1}`)
		defer resp.Body.Close()
		return string(readAll(t, resp.Body))
	}
	a, b := get(), get()
	strip := func(s string) string { _, after, _ := strings.Cut(s, `"choices"`); return after }
	if strip(a) != strip(b) {
		t.Errorf("same seed, different outputs:\n%s\n%s", a, b)
	}
}

// TestModelsHealth covers /v1/models, /health and an unknown path
// (/metrics: metrics_test.go).
func TestModelsHealth(t *testing.T) {
	e := startEngine(t, testConfig())
	get := func(path string) (int, string) {
		resp, err := e.client.Get(e.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, string(readAll(t, resp.Body))
	}
	if code, body := get("/v1/models"); code != 200 || !strings.Contains(body, `"id":"ttftlens-ref"`) {
		t.Errorf("/v1/models %d %s", code, body)
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health %d", code)
	}
	if code, body := get("/nope"); code != 404 || !strings.Contains(body, `"error"`) {
		t.Errorf("/nope %d %s", code, body)
	}
}

// TestProgressComments checks the progress protocol (PROTOCOL.md): a
// streamed request announces queued with its headers and prefill when the
// scheduler takes it, both before any data; held headers and non-streamed
// responses carry none.
func TestProgressComments(t *testing.T) {
	e := startEngine(t, testConfig())
	tests := []struct {
		name, fault string
		stream      bool
		want        []string
	}{
		{"queued, then prefill", "queue_delay=50ms", true, []string{"queued", "prefill"}},
		{"no queue", "", true, []string{"queued", "prefill"}},
		{"held headers", "hold_headers", true, nil},
		{"not streamed", "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"ttftlens-ref","prompt":"Once upon a time","stream":%v,"max_tokens":3}`, tt.stream)
			resp := e.post(t, context.Background(), "/v1/completions", body, FaultHeader, tt.fault)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			sawData := false
			for _, line := range strings.Split(string(raw), "\n") {
				if p, ok := strings.CutPrefix(line, ": ttftlens-phase "); ok {
					if sawData {
						t.Errorf("progress comment %q after data", p)
					}
					got = append(got, p)
				}
				sawData = sawData || strings.HasPrefix(line, "data:")
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("progress %q, want %q\n%s", got, tt.want, raw)
			}
		})
	}
}
