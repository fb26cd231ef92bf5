package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func requestGateway(t testing.TB) *Snapshot {
	cfg := &Config{
		MaxBodyBytes: 4096,
		Routes: []RouteConfig{
			{Model: "llama", Pool: "p", MaxTokens: 100, MaxN: 2},
			{Model: "qwen-*", Pool: "p"},
		},
		Pools: onePool("http://127.0.0.1:1"),
	}
	g, _ := newGateway(t, cfg, Options{})
	return g.Snapshot()
}

func TestCheckRequest(t *testing.T) {
	s := requestGateway(t)
	var p fastjson.Parser
	const msgs = `"messages":[{"role":"user","content":"hello world!"}]`
	tests := []struct {
		name  string
		ep    Endpoint
		body  string
		param string // wanted Rejection.Param; "" with code "" = accepted
		code  string
		check func(t *testing.T, r Request)
	}{
		{"minimal", Chat, `{"model":"llama",` + msgs + `}`, "", "", func(t *testing.T, r Request) {
			// 12 bytes → 3 tokens, + 4 per message + 3 for the reply.
			if string(r.Model) != "llama" || r.Route.Model != "llama" || r.Stream || r.MaxTokens != 0 || r.PromptTokens != 10 {
				t.Errorf("%+v", r)
			}
			if r.Reserve() != 110 { // no max_tokens: the route's cap is reserved
				t.Errorf("Reserve = %d", r.Reserve())
			}
		}},
		{"everything", Chat, `{"model":"llama",` + msgs + `,"stream":true,"stream_options":{"include_usage":true},
			"max_tokens":50,"temperature":0,"top_p":1,"n":2,"seed":7,"logprobs":null}`, "", "", func(t *testing.T, r Request) {
			if !r.Stream || !r.IncludeUsage || r.MaxTokens != 50 || r.Reserve() != 60 {
				t.Errorf("%+v", r)
			}
		}},
		{"max_completion_tokens wins", Chat, `{"model":"llama",` + msgs + `,"max_tokens":80,"max_completion_tokens":20}`, "", "", func(t *testing.T, r Request) {
			if r.MaxTokens != 20 {
				t.Errorf("MaxTokens = %d", r.MaxTokens)
			}
		}},
		{"glob route, no cap", Chat, `{"model":"qwen-7b",` + msgs + `,"max_tokens":100000,"temperature":2,"top_p":0.01,"stream":false}`, "", "", func(t *testing.T, r Request) {
			if r.Route.Model != "qwen-*" || r.MaxTokens != 100000 {
				t.Errorf("%+v", r)
			}
		}},
		{"nulls are absent", Chat, `{"model":"llama",` + msgs + `,"max_tokens":null,"temperature":null,"top_p":null,"n":null,"stream":null,"stream_options":null}`, "", "", nil},
		{"content parts and images", Chat, `{"model":"llama","messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, "", "", func(t *testing.T, r Request) {
			if r.PromptTokens != 2+tokensPerImage+tokensPerMessage+tokensPerReply {
				t.Errorf("PromptTokens = %d", r.PromptTokens)
			}
		}},
		{"completions prompt", Completions, `{"model":"llama","prompt":"12345678"}`, "", "", func(t *testing.T, r Request) {
			if r.PromptTokens != 2 {
				t.Errorf("PromptTokens = %d", r.PromptTokens)
			}
		}},
		{"completions token ids", Completions, `{"model":"llama","prompt":[1,2,3]}`, "", "", func(t *testing.T, r Request) {
			if r.PromptTokens != 3 {
				t.Errorf("PromptTokens = %d", r.PromptTokens)
			}
		}},
		{"escaped model", Chat, `{"model":"ll\u0061ma",` + msgs + `}`, "", "", nil},

		{"malformed", Chat, `{"model":`, "", "invalid_json", nil},
		{"not an object", Chat, `["model"]`, "", "invalid_json", nil},
		{"empty body", Chat, ``, "", "invalid_json", nil},
		{"too large", Chat, `{"model":"llama",` + msgs + `,"pad":"` + strings.Repeat("x", 4096) + `"}`, "", "request_too_large", nil},
		{"no model", Chat, `{` + msgs + `}`, "model", "invalid_value", nil},
		{"model not a string", Chat, `{"model":7,` + msgs + `}`, "model", "invalid_value", nil},
		{"unknown model", Chat, `{"model":"gpt-4",` + msgs + `}`, "model", "model_not_found", nil},
		{"glob does not match prefix", Chat, `{"model":"xqwen-7b",` + msgs + `}`, "model", "model_not_found", nil},
		{"no messages", Chat, `{"model":"llama"}`, "messages", "invalid_value", nil},
		{"empty messages", Chat, `{"model":"llama","messages":[]}`, "messages", "invalid_value", nil},
		{"message not object", Chat, `{"model":"llama","messages":["hi"]}`, "messages", "invalid_value", nil},
		{"no prompt", Completions, `{"model":"llama"}`, "prompt", "invalid_value", nil},
		{"prompt object", Completions, `{"model":"llama","prompt":{}}`, "prompt", "invalid_value", nil},
		{"max_tokens over cap", Chat, `{"model":"llama",` + msgs + `,"max_tokens":101}`, "max_tokens", "invalid_value", nil},
		{"max_tokens zero", Chat, `{"model":"llama",` + msgs + `,"max_tokens":0}`, "max_tokens", "invalid_value", nil},
		{"max_tokens negative", Chat, `{"model":"qwen-1",` + msgs + `,"max_tokens":-5}`, "max_tokens", "invalid_value", nil},
		{"max_tokens fraction", Chat, `{"model":"llama",` + msgs + `,"max_tokens":1.5}`, "max_tokens", "invalid_value", nil},
		{"max_tokens string", Chat, `{"model":"llama",` + msgs + `,"max_tokens":"10"}`, "max_tokens", "invalid_value", nil},
		{"max_completion_tokens over cap", Chat, `{"model":"llama",` + msgs + `,"max_completion_tokens":1000}`, "max_completion_tokens", "invalid_value", nil},
		{"temperature high", Chat, `{"model":"llama",` + msgs + `,"temperature":2.0001}`, "temperature", "invalid_value", nil},
		{"temperature negative", Chat, `{"model":"llama",` + msgs + `,"temperature":-0.1}`, "temperature", "invalid_value", nil},
		{"temperature string", Chat, `{"model":"llama",` + msgs + `,"temperature":"hot"}`, "temperature", "invalid_value", nil},
		{"top_p zero", Chat, `{"model":"llama",` + msgs + `,"top_p":0}`, "top_p", "invalid_value", nil},
		{"top_p over one", Chat, `{"model":"llama",` + msgs + `,"top_p":1.5}`, "top_p", "invalid_value", nil},
		{"n over route", Chat, `{"model":"llama",` + msgs + `,"n":3}`, "n", "invalid_value", nil},
		{"n over default", Chat, `{"model":"qwen-1",` + msgs + `,"n":2}`, "n", "invalid_value", nil},
		{"n zero", Chat, `{"model":"llama",` + msgs + `,"n":0}`, "n", "invalid_value", nil},
		{"stream string", Chat, `{"model":"llama",` + msgs + `,"stream":"true"}`, "stream", "invalid_value", nil},
		{"stream_options not object", Chat, `{"model":"llama",` + msgs + `,"stream_options":true}`, "stream_options", "invalid_value", nil},
		{"include_usage not bool", Chat, `{"model":"llama",` + msgs + `,"stream_options":{"include_usage":1}}`, "stream_options.include_usage", "invalid_value", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, rej := s.CheckRequest(&p, tt.ep, []byte(tt.body))
			if tt.code == "" {
				if rej != nil {
					t.Fatalf("rejected: %+v", rej)
				}
				if tt.check != nil {
					tt.check(t, r)
				}
				return
			}
			if rej == nil {
				t.Fatalf("accepted: %+v", r)
			}
			wantStatus := 400
			if tt.code == "request_too_large" {
				wantStatus = 413
			}
			if rej.Status != wantStatus || rej.Type != "invalid_request_error" || rej.Param != tt.param || rej.Code != tt.code ||
				rej.Reason.String() != "invalid_request" || rej.Message == "" {
				t.Fatalf("rejection %+v, want status %d param %q code %q", rej, wantStatus, tt.param, tt.code)
			}
			if want, ok := rej.Detail.Reason(); !ok || want != rej.Reason {
				t.Fatalf("detail %q does not refine %v in endreason", rej.Detail, rej.Reason)
			}
			// The error body is valid JSON with the OpenAI shape.
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    string  `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rej.AppendJSON(nil), &body); err != nil {
				t.Fatalf("error body: %v: %s", err, rej.AppendJSON(nil))
			}
			if body.Error.Code != tt.code || (tt.param == "") != (body.Error.Param == nil) {
				t.Fatalf("error body %s", rej.AppendJSON(nil))
			}
		})
	}
}

// TestCheckRequestRefusedModel: a refused request still carries the model
// its body names, whichever check refused it, so its record names it.
func TestCheckRequestRefusedModel(t *testing.T) {
	s := requestGateway(t)
	var p fastjson.Parser
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body, model string
	}{
		{"stream not a boolean", `{"model":"llama",` + msgs + `,"stream":"yes"}`, "llama"},
		{"unknown model", `{"model":"gpt-4",` + msgs + `}`, "gpt-4"},
		{"escaped model", `{"model":"gpt\u002d4",` + msgs + `}`, "gpt-4"},
		{"no messages", `{"model":"llama"}`, "llama"},
		{"max_tokens over cap", `{"model":"llama",` + msgs + `,"max_tokens":101}`, "llama"},
		{"temperature high", `{"model":"qwen-7b",` + msgs + `,"temperature":3}`, "qwen-7b"},
		{"n over route", `{"model":"llama",` + msgs + `,"n":3}`, "llama"},
		{"include_usage not bool", `{"model":"llama",` + msgs + `,"stream_options":{"include_usage":1}}`, "llama"},
		{"the last model key", `{"model":"gpt-4","model":"llama","temperature":9,` + msgs + `}`, "llama"},
		{"model not a string", `{"model":7,` + msgs + `}`, ""},
		{"no model", `{` + msgs + `}`, ""},
		{"malformed", `{"model":"llama",`, ""},
		{"too large", `{"model":"llama",` + msgs + `,"pad":"` + strings.Repeat("x", 4096) + `"}`, ""}, // not parsed
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, rej := s.CheckRequest(&p, Chat, []byte(tt.body))
			if rej == nil {
				t.Fatalf("accepted: %+v", r)
			}
			if got := (Request{Model: r.Model}); string(r.Model) != tt.model || !reflect.DeepEqual(r, got) {
				t.Errorf("refused with %+v, want only Model %q", r, tt.model)
			}
		})
	}
}

// FuzzCheckRequest: the validator never panics, and what it accepts
// satisfies every rule as encoding/json reads the same body.
func FuzzCheckRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"llama","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":1,"top_p":0.5,"n":1,"stream":true}`,
		`{"model":"qwen-x","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stream_options":{"include_usage":true}}`,
		`{"model":"llama","messages":[{}],"max_tokens":100,"max_completion_tokens":1}`,
		`{"model":"llama","prompt":[1,2,3]}`,
		`{"model":"llama","messages":[{"content":"\ud83d\ude00"}],"n":2,"top_p":1e-300}`,
		`{"model":"llama","model":"gpt","messages":[{}]}`,
		`[]`, `{`, `{"model":null}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	s := requestGateway(f)
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, body []byte, completions bool) {
		ep := Chat
		if completions {
			ep = Completions
		}
		r, rej := s.CheckRequest(&p, ep, body)
		if rej != nil {
			if rej.Status != 400 || rej.Message == "" {
				t.Fatalf("bad rejection %+v", rej)
			}
			if _, ok := rej.Detail.Reason(); !ok {
				t.Fatalf("detail %q unknown", rej.Detail)
			}
			if err := json.Unmarshal(rej.AppendJSON(nil), new(any)); err != nil {
				t.Fatalf("error body not JSON: %v", err)
			}
			return
		}
		if r.Route == nil || r.PromptTokens < 0 || r.MaxTokens < 0 {
			t.Fatalf("accepted without a route: %+v", r)
		}
		if r.Route.MaxTokens > 0 && r.MaxTokens > r.Route.MaxTokens {
			t.Fatalf("max tokens %d over cap %d", r.MaxTokens, r.Route.MaxTokens)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return // fastjson is laxer in places (e.g. invalid UTF-8); nothing to compare
		}
		if tv, ok := m["temperature"].(float64); ok && (tv < 0 || tv > 2) {
			t.Fatalf("temperature %v accepted", tv)
		}
		if tv, ok := m["top_p"].(float64); ok && (tv <= 0 || tv > 1) {
			t.Fatalf("top_p %v accepted", tv)
		}
		if nv, ok := m["n"].(float64); ok && (nv < 1 || nv > float64(r.Route.MaxN)) {
			t.Fatalf("n %v accepted", nv)
		}
		if sv, ok := m["stream"]; ok && sv != nil {
			if b, isBool := sv.(bool); !isBool || b != r.Stream {
				t.Fatalf("stream %v read as %v", sv, r.Stream)
			}
		}
	})
}

// TestCheckRequestMessages: the 400 messages read as sentences for a
// person, in OpenAI's style: a malformed body says what is wrong and where,
// not the parser's internals or the rest of the body; n's range reads
// naturally when the route allows exactly one.
func TestCheckRequestMessages(t *testing.T) {
	s := requestGateway(t)
	var p fastjson.Parser
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	const prefix = "We could not parse the JSON body of your request: "
	tests := []struct{ name, body, want string }{
		{"trailing comma", `{"model":"llama",}`, prefix + `invalid character '}' looking for beginning of object key string at byte 18.`},
		{"single quotes", `{'model':'llama'}`, prefix + `invalid character '\'' looking for beginning of object key string at byte 2.`},
		{"cut short", `{"model":`, prefix + `the body ends before the JSON value does (after 9 bytes).`},
		{"empty", ``, prefix + `the body is empty.`},
		{"blank", " \n ", prefix + `the body is empty.`},
		{"garbage after", `{"model":"llama"} x`, prefix + `invalid character 'x' after top-level value at byte 19.`},
		{"multi-line", "{\n  \"model\": \"llama\",\n  \"n\": 1,\n}", prefix + `invalid character '}' looking for beginning of object key string at byte 33 (line 4, column 1).`},
		{"too deep for fastjson", strings.Repeat("[", 400) + strings.Repeat("]", 400), prefix + `too big depth for the nested JSON; it exceeds 300.`},
		{"n over a single n", `{"model":"qwen-1",` + msgs + `,"n":2}`, "n must be 1 for this model; got 2."},
		{"n over a range", `{"model":"llama",` + msgs + `,"n":3}`, "n must be between 1 and 2 for this model; got 3."},
		{"n zero", `{"model":"llama",` + msgs + `,"n":0}`, "n must be between 1 and 2 for this model; got 0."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rej := s.CheckRequest(&p, Chat, []byte(tt.body))
			if rej == nil {
				t.Fatal("accepted")
			}
			if rej.Message != tt.want {
				t.Errorf("message\n got %q\nwant %q", rej.Message, tt.want)
			}
			if strings.Contains(rej.Message, "unparsed tail") || strings.Contains(rej.Message, "cannot parse") {
				t.Errorf("parser internals in %q", rej.Message)
			}
		})
	}
}
