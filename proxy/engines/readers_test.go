package engines

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

func newTL() *stages.Timeline {
	var tl stages.Timeline
	tl.Start(func() int64 { return 0 }, time.Time{})
	return &tl
}

func engineOf(tl *stages.Timeline) map[stages.EngineDur]time.Duration {
	m := map[stages.EngineDur]time.Duration{}
	for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
		if v, ok := tl.Engine(d); ok {
			m[d] = v
		}
	}
	return m
}

func TestNewReader(t *testing.T) {
	for _, k := range Kinds {
		r, err := NewReader(k)
		if err != nil || r.Kind() != k {
			t.Errorf("NewReader(%q) = %v, %v", k, r, err)
		}
	}
	for _, k := range []string{"auto", "", "VLLM", "openai", "llama.cpp"} {
		if r, err := NewReader(k); err == nil || !errors.Is(err, ErrUnknownKind) || r != nil {
			t.Errorf("NewReader(%q) = %v, %v; want ErrUnknownKind", k, r, err)
		}
	}
}

// TestReadersAgreeWithInspect: on OpenAI-compatible data, every reader says
// what OpenAI.Inspect says about the common fields.
func TestReadersAgreeWithInspect(t *testing.T) {
	cases := []string{openaiRole, openaiContent, openaiFinish, openaiUsage, openaiNoUsage, vllmRole, vllmContent,
		vllmFinish, vllmStopTok, vllmUsage, vllmAbort, vllmReason, vllmReason2, vllmReasonNo, llamacppFinal, llamacppContent,
		vllmReasonToAnswer, deepseekReason, deepseekAnswer, deepseekUsage, llamacppReason, wholeReasonAnswer, wholeReasonOnly, reasonThenAnswer2,
		completionText, completionEmpty, completionWhole, toolCallFirst, toolCallArgs, toolCallFinish, toolCallsEmpty,
		wholeChat, wholeChatTools, wholeChatEmpty, wholeChatFilter, multiChoice, openaiError, vllmError, tgiError,
		tgiErrorGen, errorNull, escapedContent, nullChoices, weirdTypes, choicesNotArray, deltaNull, usageFloatTokens,
		"[DONE]", " [DONE]\n", "", "{", "[1]", "\xff", `{}`}
	var o OpenAI
	for _, k := range Kinds {
		if k == KindAnthropic {
			continue // another protocol: its own fields only
		}
		r, _ := NewReader(k)
		for _, c := range cases {
			want := o.Inspect([]byte(c))
			got := r.Event([]byte(c), newTL())
			base := got
			base.Timing, base.Inferred, base.EventType, base.CachedTokens, base.Cached, base.UsageOnly, base.Decode = false, false, EventNone, 0, false, false, 0
			base.ReasoningUsage, base.ReasoningTokens = false, 0
			if base != want {
				t.Errorf("%s.Event(%.60q) = %+v, Inspect says %+v", k, c, got, want)
			}
		}
	}
}

func TestInferQueue(t *testing.T) {
	// tl: the request sent at 1 ms; its first token arrived at arrived (0:
	// only parsed, at first); the engine's reported parts.
	type tl struct {
		arrived, first time.Duration
		reported       map[stages.EngineDur]time.Duration
	}
	mk := func(c tl) *stages.Timeline {
		t := newTL()
		if c.first > 0 {
			t.MarkAt(stages.UpstreamSent, ms)
			t.MarkAt(stages.FirstToken, c.first)
		}
		if c.arrived > 0 {
			t.MarkAt(stages.FirstTokenArrived, c.arrived)
		}
		for d, v := range c.reported {
			t.SetEngine(d, v)
		}
		return t
	}
	pf := func(v time.Duration) map[stages.EngineDur]time.Duration {
		return map[stages.EngineDur]time.Duration{stages.EnginePrefill: v}
	}
	tests := []struct {
		name     string
		tl       tl
		slotWait time.Duration
		queue    time.Duration // -1: none recorded
		inferred bool
	}{
		{"window minus prefill", tl{first: 51 * ms, reported: pf(20 * ms)}, 0, 30 * ms, true},
		{"from the arrival, not the parse", tl{arrived: 41 * ms, first: 51 * ms, reported: pf(20 * ms)}, 0, 20 * ms, true},
		{"window minus every reported part", tl{first: 51 * ms, reported: map[stages.EngineDur]time.Duration{
			stages.EnginePrefill: 20 * ms, stages.EngineLoad: 15 * ms, stages.EngineRecv: 2 * ms, stages.EngineSync: 9 * ms}},
			0, 13 * ms, true},
		{"queue reported", tl{first: 51 * ms, reported: map[stages.EngineDur]time.Duration{
			stages.EnginePrefill: 20 * ms, stages.EngineQueue: 5 * ms}}, 40 * ms, 5 * ms, false},
		{"no prefill, no slot wait", tl{first: 51 * ms}, 0, -1, false},
		{"no marks", tl{reported: pf(20 * ms)}, 10 * ms, -1, false},
		{"prefill longer than the window", tl{first: 11 * ms, reported: pf(20 * ms)}, 0, -1, false},
		{"prefill equal to the window", tl{first: 21 * ms, reported: pf(20 * ms)}, 0, -1, false},
		{"zero prefill", tl{first: 11 * ms, reported: pf(0)}, 0, 10 * ms, true},
		{"slot wait, with a prefill", tl{first: 51 * ms, reported: pf(20 * ms)}, 25 * ms, 25 * ms, true},
		{"slot wait, nothing reported", tl{first: 51 * ms}, 25 * ms, 25 * ms, true},
		{"slot wait cut to what the report leaves", tl{first: 51 * ms, reported: pf(20 * ms)}, 45 * ms, 30 * ms, true},
		{"slot wait, the report fills the window", tl{first: 51 * ms, reported: pf(50 * ms)}, 25 * ms, -1, false},
		{"negative slot wait: none", tl{first: 51 * ms}, -5 * ms, -1, false},
	}
	for _, tc := range tests {
		tl := mk(tc.tl)
		if got := InferQueue(tl, tc.slotWait); got != (tc.queue >= 0 && tc.inferred) {
			t.Errorf("%s: InferQueue = %v", tc.name, got)
		}
		q, ok := tl.Engine(stages.EngineQueue)
		if tc.queue < 0 && ok || tc.queue >= 0 && (!ok || q != tc.queue) {
			t.Errorf("%s: queue %v (set %v), want %v", tc.name, q, ok, tc.queue)
		}
		if got := tl.Inferred().Has(stages.EngineQueue); got != tc.inferred {
			t.Errorf("%s: queue inferred %v, want %v", tc.name, got, tc.inferred)
		}
	}
	if InferQueue(nil, ms) {
		t.Error("InferQueue(nil) = true")
	}
}

func TestHeaders(t *testing.T) {
	tests := []struct {
		kind string
		h    http.Header
		ok   bool
		want map[stages.EngineDur]time.Duration
	}{
		{KindTGI, http.Header{"X-Queue-Time": {"37"}, "X-Validation-Time": {"2"}, "X-Inference-Time": {"380"}, "X-Total-Time": {"419"}}, true,
			map[stages.EngineDur]time.Duration{stages.EngineQueue: 37 * ms, stages.EngineTokenize: 2 * ms}},
		{KindTGI, http.Header{"X-Queue-Time": {" 0 "}}, true, map[stages.EngineDur]time.Duration{stages.EngineQueue: 0}},
		{KindTGI, http.Header{"X-Queue-Time": {"1.5"}}, true, map[stages.EngineDur]time.Duration{stages.EngineQueue: 1500 * us}},
		// Streams: only compute headers.
		{KindTGI, http.Header{"X-Compute-Type": {"1-nvidia-a10g"}, "X-Compute-Characters": {"21"}}, false, map[stages.EngineDur]time.Duration{}},
		{KindTGI, http.Header{"X-Queue-Time": {"-1"}, "X-Validation-Time": {"abc"}}, false, map[stages.EngineDur]time.Duration{}},
		{KindTGI, http.Header{"X-Queue-Time": {"NaN"}, "X-Validation-Time": {"1e400"}}, false, map[stages.EngineDur]time.Duration{}},
		{KindTGI, http.Header{"X-Queue-Time": {"86400001"}}, false, map[stages.EngineDur]time.Duration{}},
		{KindReference, http.Header{"Server-Timing": {"queue;dur=1, prefill;dur=2"}}, true,
			map[stages.EngineDur]time.Duration{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{KindReference, http.Header{"Server-Timing": {"cdn-cache;desc=HIT"}}, false, map[stages.EngineDur]time.Duration{}},
		{KindReference, http.Header{}, false, map[stages.EngineDur]time.Duration{}},
	}
	for _, tc := range tests {
		r, _ := NewReader(tc.kind)
		tl := newTL()
		if ok := r.Header(headerFunc(tc.h), tl); ok != tc.ok {
			t.Errorf("%s.Header(%v) = %v, want %v", tc.kind, tc.h, ok, tc.ok)
		}
		if got := engineOf(tl); !mapsEqual(got, tc.want) {
			t.Errorf("%s.Header(%v) recorded %v, want %v", tc.kind, tc.h, got, tc.want)
		}
		if r.Header(headerFunc(tc.h), nil) {
			t.Errorf("%s.Header with a nil timeline reported recording", tc.kind)
		}
	}
	// The others read no header, whatever comes.
	all := http.Header{"Server-Timing": {"queue;dur=1"}, "X-Queue-Time": {"5"}, "X-Validation-Time": {"1"}}
	for _, k := range []string{KindVLLM, KindLlamaCpp, KindOllama, KindSGLang, KindAnthropic, KindGeneric} {
		r, _ := NewReader(k)
		tl := newTL()
		if r.Header(headerFunc(all), tl) || tl.EngineReported() {
			t.Errorf("%s read a header", k)
		}
	}
}

func mapsEqual(a, b map[stages.EngineDur]time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestReaderEdges: engine fields in odd shapes.
func TestReaderEdges(t *testing.T) {
	type durs = map[stages.EngineDur]time.Duration
	const (
		Q  = stages.EngineQueue
		PF = stages.EnginePrefill
	)
	tests := []struct {
		name, kind, data string
		want             Event
		durs             durs
	}{
		// vLLM.
		{"vllm metrics null", KindVLLM, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2},"metrics":null}`,
			Event{Usage: true, PromptTokens: 1, CompletionTokens: 2, UsageOnly: true}, durs{}},
		{"vllm all null", KindVLLM, `{"choices":[],"metrics":{"queue_time_ms":null,"time_to_first_token_ms":null}}`, Event{}, durs{}},
		{"vllm queue 0 is measured", KindVLLM, `{"choices":[],"metrics":{"queue_time_ms":0,"time_to_first_token_ms":0.001}}`,
			Event{Timing: true}, durs{Q: 0, PF: us}},
		{"vllm strings are not numbers", KindVLLM, `{"metrics":{"queue_time_ms":"4","time_to_first_token_ms":true}}`, Event{}, durs{}},
		{"vllm past a day", KindVLLM, `{"metrics":{"queue_time_ms":1e300,"time_to_first_token_ms":-1e12}}`, Event{}, durs{}},
		{"vllm metrics an array", KindVLLM, `{"metrics":[1,2]}`, Event{}, durs{}},
		// llama.cpp.
		{"llamacpp timings without prompt_ms", KindLlamaCpp, `{"choices":[{"delta":{"content":"x"}}],"timings":{"predicted_ms":5,"cache_n":4}}`,
			Event{Content: true, CachedTokens: 4, Cached: true, Decode: 5 * ms}, durs{}},
		{"llamacpp timings null", KindLlamaCpp, `{"choices":[],"timings":null}`, Event{}, durs{}},
		{"llamacpp native stop limit", KindLlamaCpp, `{"content":"","stop":true,"stop_type":"limit","tokens_predicted":16,"tokens_evaluated":4}`,
			Event{Finish: endreason.FinishLength, Usage: true, PromptTokens: 4, CompletionTokens: 16}, durs{}},
		{"llamacpp native not stopped: no usage", KindLlamaCpp, `{"content":"a","stop":false,"tokens_predicted":1,"tokens_evaluated":4}`,
			Event{Content: true}, durs{}},
		{"llamacpp native content is answer", KindLlamaCpp, `{"index":0,"content":" Paris","stop":false}`, Event{Content: true}, durs{}},
		// Usage that counts the reasoning tokens (OpenAI, DeepSeek).
		{"usage with reasoning tokens", KindGeneric, deepseekUsage,
			Event{Finish: endreason.FinishStop, Usage: true, PromptTokens: 13, CompletionTokens: 412, ReasoningUsage: true, ReasoningTokens: 398}, durs{}},
		{"usage with zero reasoning tokens", KindVLLM, openaiUsage,
			Event{Usage: true, PromptTokens: 12, CompletionTokens: 34, Cached: true, UsageOnly: true, ReasoningUsage: true}, durs{}},
		{"usage without details", KindGeneric, vllmUsage,
			Event{Usage: true, PromptTokens: 27, CompletionTokens: 128, UsageOnly: true}, durs{}},
		{"reasoning tokens not a count", KindGeneric, `{"choices":[],"usage":{"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":"2"}}}`,
			Event{Usage: true, CompletionTokens: 3, UsageOnly: true}, durs{}},
		// Ollama.
		{"ollama thinking is reasoning", KindOllama, `{"model":"qwen3","message":{"role":"assistant","content":"","thinking":"Hmm"},"done":false}`,
			Event{Content: true, Reasoning: true}, durs{}},
		{"ollama thinking with content is answer", KindOllama, `{"model":"qwen3","message":{"role":"assistant","content":"Hi","thinking":"Hmm"},"done":false}`,
			Event{Content: true}, durs{}},
		{"ollama generate thinking", KindOllama, `{"model":"qwen3","response":"","thinking":"Hmm","done":false}`,
			Event{Content: true, Reasoning: true}, durs{}},
		{"ollama tool call is answer", KindOllama, `{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}`,
			Event{Content: true}, durs{}},
		{"ollama durations before done are ignored", KindOllama, `{"message":{"content":"a"},"done":false,"load_duration":5,"prompt_eval_duration":7}`,
			Event{Content: true}, durs{}},
		{"ollama done, no counts, no durations", KindOllama, `{"done":true,"done_reason":"load"}`,
			Event{Done: true, Finish: endreason.FinishOther}, durs{}},
		{"ollama done_reason unload", KindOllama, `{"model":"m","created_at":"t","response":"","done":true,"done_reason":"unload"}`,
			Event{Done: true, Finish: endreason.FinishOther}, durs{}},
		{"ollama error", KindOllama, `{"error":"model 'x' not found"}`, Event{Error: true}, durs{}},
		{"ollama done as a string is not done", KindOllama, `{"done":"true","response":"x"}`, Event{Content: true}, durs{}},
		{"ollama negative count", KindOllama, `{"done":true,"prompt_eval_count":-1,"eval_count":3}`,
			Event{Done: true, Usage: true, CompletionTokens: 3}, durs{}},
		// SGLang.
		{"sglang finish as a string", KindSGLang, `{"text":"a","meta_info":{"finish_reason":"length"}}`,
			Event{Content: true, Finish: endreason.FinishLength}, durs{}},
		{"sglang negative queue is not reported", KindSGLang, `{"text":"","meta_info":{"queue_time":-0.5}}`, Event{}, durs{}},
		{"sglang time_stats fallback", KindSGLang, `{"text":"","meta_info":{"time_stats":{"wait_queue_entry_time":100.0,"forward_entry_time":100.25,"prefill_finished_time":100.75}}}`,
			Event{Timing: true}, durs{Q: 250 * ms, PF: 500 * ms}},
		{"sglang high choice index", KindSGLang, `{"index":9,"text":"a","meta_info":{}}`, Event{Content: true}, durs{}},
		{"sglang no meta_info: OpenAI chunk", KindSGLang, openaiContent, Event{Content: true}, durs{}},
		{"sglang text without meta_info is not native", KindSGLang, `{"text":"a"}`, Event{}, durs{}},
		// TGI.
		{"tgi special token", KindTGI, `{"token":{"id":2,"text":"</s>","special":true},"generated_text":null,"details":null}`, Event{}, durs{}},
		{"tgi final generated_text with token: not double content, the end", KindTGI, `{"token":{"id":2,"text":"","special":false},"generated_text":"abc","details":{"finish_reason":"stop_sequence","generated_tokens":3}}`,
			Event{Finish: endreason.FinishStop, Done: true, Usage: true, CompletionTokens: 3}, durs{}},
		{"tgi final event without details: the end, no finish", KindTGI, `{"index":3,"token":{"id":2,"text":".","special":false},"generated_text":"a.","details":null}`,
			Event{Content: true, Done: true}, durs{}},
		{"tgi openai error object", KindTGI, `{"error":{"message":"x","http_status_code":422}}`, Event{Error: true}, durs{}},
		// Anthropic.
		{"anthropic block start with text", KindAnthropic, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}`,
			Event{Content: true, EventType: EventContentBlockStart}, durs{}},
		{"anthropic server_tool_use", KindAnthropic, `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
			Event{Content: true, EventType: EventContentBlockStart}, durs{}},
		{"anthropic thinking delta is reasoning", KindAnthropic, `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`,
			Event{Content: true, Reasoning: true, EventType: EventContentBlockDelta}, durs{}},
		{"anthropic signature delta is not content", KindAnthropic, `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
			Event{EventType: EventContentBlockDelta}, durs{}},
		{"anthropic thinking block start", KindAnthropic, `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"So"}}`,
			Event{Content: true, Reasoning: true, EventType: EventContentBlockStart}, durs{}},
		{"anthropic whole message: thinking and text", KindAnthropic, `{"type":"message","content":[{"type":"thinking","thinking":"So","signature":"x"},{"type":"text","text":"Yes"}],"stop_reason":"end_turn"}`,
			Event{Content: true, EventType: EventMessage, Finish: endreason.FinishStop}, durs{}},
		{"anthropic citations delta", KindAnthropic, `{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}}`,
			Event{EventType: EventContentBlockDelta}, durs{}},
		{"anthropic empty text delta", KindAnthropic, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`,
			Event{EventType: EventContentBlockDelta}, durs{}},
		{"anthropic pause_turn", KindAnthropic, `{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":3}}`,
			Event{EventType: EventMessageDelta, Finish: endreason.FinishOther, Usage: true, CompletionTokens: 3}, durs{}},
		{"anthropic context window", KindAnthropic, `{"type":"message_delta","delta":{"stop_reason":"model_context_window_exceeded"}}`,
			Event{EventType: EventMessageDelta, Finish: endreason.FinishLength}, durs{}},
		{"anthropic error event", KindAnthropic, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			Event{EventType: EventError, Error: true}, durs{}},
		{"anthropic OpenAI chunk is not read", KindAnthropic, openaiContent, Event{EventType: EventOther}, durs{}},
		{"anthropic no type", KindAnthropic, `{"delta":{"type":"text_delta","text":"x"}}`, Event{EventType: EventOther}, durs{}},
		{"anthropic [DONE] still ends", KindAnthropic, `[DONE]`, Event{Done: true}, durs{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewReader(tc.kind)
			tl := newTL()
			if got := r.Event([]byte(tc.data), tl); got != tc.want {
				t.Errorf("%s.Event(%s)\n got %+v\nwant %+v", tc.kind, tc.data, got, tc.want)
			}
			if got := engineOf(tl); !mapsEqual(got, tc.durs) {
				t.Errorf("recorded %v, want %v", got, tc.durs)
			}
		})
	}
}

// TestSGLangText: cumulative and incremental text, and Reset.
func TestSGLangText(t *testing.T) {
	ev := func(text string) string {
		return `{"text":` + strings.ReplaceAll(`"`+text+`"`, "\n", `\n`) + `,"meta_info":{}}`
	}
	var r SGLangReader
	seq := []struct {
		text    string
		content bool
	}{
		{"", false}, {"Hel", true}, {"Hello", true}, {"Hello", false}, {"Hello world", true},
		{" x", true}, {" x", false}, {" y", true}, {"a longer piece", true}, {"z", true},
	}
	for i, s := range seq {
		if got := r.Event([]byte(ev(s.text)), nil).Content; got != s.content {
			t.Errorf("step %d %q: content %v, want %v", i, s.text, got, s.content)
		}
	}
	r.Reset()
	if !r.Event([]byte(ev("z")), nil).Content {
		t.Error("after Reset, the first text is not content")
	}
}

// TestAnthropicUsageAcrossEvents: message_delta reports the input tokens of
// message_start; Reset forgets them.
func TestAnthropicUsageAcrossEvents(t *testing.T) {
	var r AnthropicReader
	start := `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":1}}}`
	if ev := r.Event([]byte(start), nil); ev.Usage || ev.EventType != EventMessageStart {
		t.Errorf("message_start: %+v", ev)
	}
	d := `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`
	want := Event{EventType: EventMessageDelta, Finish: endreason.FinishStop, Usage: true, PromptTokens: 10, CompletionTokens: 7, CachedTokens: 2, Cached: true}
	if ev := r.Event([]byte(d), nil); ev != want {
		t.Errorf("message_delta: %+v, want %+v", ev, want)
	}
	r.Reset()
	want.PromptTokens, want.CachedTokens, want.Cached = 0, 0, false
	if ev := r.Event([]byte(d), nil); ev != want {
		t.Errorf("after Reset: %+v, want %+v", ev, want)
	}
}

// TestTGIPromptTokensFromHeader: a whole /generate body, whose details have
// no input_length, takes the prompt count from x-prompt-tokens; the
// stream's input_length wins; Reset forgets the header.
func TestTGIPromptTokensFromHeader(t *testing.T) {
	var r TGIReader
	whole := []byte(`{"generated_text":" a b","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"prefill":[],"tokens":[]}}`)
	last := []byte(`{"index":2,"token":{"id":2,"text":" b","logprob":-0.5,"special":false},"generated_text":" a b","details":{"finish_reason":"length","generated_tokens":2,"seed":null,"input_length":4}}`)
	for _, v := range []string{"7", " 7 "} {
		r.Reset()
		r.Header(headerFunc(http.Header{"X-Prompt-Tokens": {v}}), nil)
		if ev := r.Event(whole, nil); !ev.Usage || ev.PromptTokens != 7 || ev.CompletionTokens != 2 {
			t.Errorf("x-prompt-tokens %q: %+v, want 7 prompt tokens", v, ev)
		}
		if ev := r.Event(last, nil); ev.PromptTokens != 4 {
			t.Errorf("input_length: %+v, want 4 prompt tokens", ev)
		}
	}
	for _, v := range []string{"", "-1", "7.0", "1234567890"} {
		r.Reset()
		r.Header(headerFunc(http.Header{"X-Prompt-Tokens": {v}}), nil)
		if ev := r.Event(whole, nil); ev.PromptTokens != 0 {
			t.Errorf("x-prompt-tokens %q: %+v, want no prompt count", v, ev)
		}
	}
}

func TestDetect(t *testing.T) {
	h := func(kv ...string) func(string) []byte {
		hd := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			hd.Set(kv[i], kv[i+1])
		}
		return headerFunc(hd)
	}
	tests := []struct {
		name   string
		h      func(string) []byte
		models string
		server string
		want   string
	}{
		{"reference by Server-Timing", h("Server-Timing", "queue;dur=1, prefill;dur=2"), "", "", KindReference},
		{"a CDN's Server-Timing is not the reference", h("Server-Timing", "cdn-cache;desc=HIT, edge;dur=4"), "", "", KindGeneric},
		{"reference by owned_by", nil, `{"object":"list","data":[{"id":"ref","object":"model","created":1,"owned_by":"ttftlens","root":"ref","max_model_len":4096}]}`, "", KindReference},
		{"tgi by x-compute-type", h("X-Compute-Type", "1-nvidia-a10g"), "", "", KindTGI},
		{"tgi by /info", nil, `{"model_id":"bigscience/bloom-560m","model_sha":"e985a63","model_dtype":"torch.float16","router":"text-generation-router","version":"2.4.1"}`, "", KindTGI},
		{"llama.cpp by Server", nil, "", "llama.cpp", KindLlamaCpp},
		{"llama.cpp by owned_by", nil, `{"object":"list","data":[{"id":"model.gguf","object":"model","created":1,"owned_by":"llamacpp","meta":{}}]}`, "", KindLlamaCpp},
		{"vllm by owned_by", nil, `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":1718000000,"owned_by":"vllm","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,"max_model_len":8192,"permission":[]}]}`, "uvicorn", KindVLLM},
		{"sglang by owned_by", nil, `{"object":"list","data":[{"id":"qwen/qwen2.5-0.5b-instruct","object":"model","created":1718000000,"owned_by":"sglang","root":"qwen/qwen2.5-0.5b-instruct","max_model_len":32768}]}`, "uvicorn", KindSGLang},
		{"ollama by owned_by library", nil, `{"object":"list","data":[{"id":"llama3.2:latest","object":"model","created":1718000000,"owned_by":"library"}]}`, "", KindOllama},
		{"ollama by /api/tags", nil, `{"models":[{"name":"llama3.2:latest","model":"llama3.2:latest","modified_at":"2024-06-10T06:13:21Z","size":2019393189,"digest":"a80c4f17acd5","details":{"format":"gguf"}}]}`, "", KindOllama},
		{"ollama user namespace says nothing", nil, `{"object":"list","data":[{"id":"jdoe/mymodel:latest","object":"model","created":1,"owned_by":"jdoe"}]}`, "", KindGeneric},
		{"anthropic model list", nil, `{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],"has_more":false,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}`, "", KindAnthropic},
		{"openai model list", nil, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1,"owned_by":"system"}]}`, "", KindGeneric},
		{"uvicorn alone", nil, "", "uvicorn", KindGeneric},
		{"garbage models", nil, `<html>`, "", KindGeneric},
		{"nothing", nil, "", "", KindGeneric},
		{"headers win over models", h("X-Compute-Type", "gpu"), `{"data":[{"owned_by":"vllm"}]}`, "", KindTGI},
	}
	for _, tc := range tests {
		var models []byte
		if tc.models != "" {
			models = []byte(tc.models)
		}
		if got := Detect(tc.h, models, []byte(tc.server)); got != tc.want {
			t.Errorf("%s: Detect = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// transcriptEvents returns the data of every event of the transcripts of
// testdata/<dir>, for fuzz seeds.
func transcriptEvents(t testing.TB, dir string) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.txt"))
	var out [][]byte
	for _, f := range files {
		tr := loadTranscript(t, f)
		ct := tr.header.Get("Content-Type")
		switch {
		case strings.HasPrefix(ct, "text/event-stream"):
			sc := sse.NewScanner(bytes.NewReader(tr.body), 0)
			for {
				ev, err := sc.Next()
				if err != nil {
					break
				}
				if ev.HasData {
					out = append(out, bytes.Clone(ev.Data))
				}
			}
		case strings.HasPrefix(ct, "application/x-ndjson"):
			sc := NewLineScanner(bytes.NewReader(tr.body), 0)
			for {
				_, line, err := sc.Next()
				if err == io.EOF || err != nil {
					break
				}
				out = append(out, bytes.Clone(line))
			}
		default:
			out = append(out, tr.body)
		}
	}
	return out
}

// fuzzReader checks a reader's invariants on arbitrary data: the input is
// left as it was; the result depends only on the data (after Reset) and is
// consistent; what is recorded is a plausible duration and matches Timing.
func fuzzReader(f *testing.F, kind string, dirs ...string) {
	for _, d := range dirs {
		for _, ev := range transcriptEvents(f, d) {
			f.Add(ev)
		}
	}
	for _, s := range []string{"[DONE]", "", "{", "\xff", `{"choices":[{"delta":{"content":"\ud800"}}]}`, `null`, `{"error":null}`} {
		f.Add([]byte(s))
	}
	r, err := NewReader(kind)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := string(data)
		r.Reset()
		tl := newTL()
		ev := r.Event(data, tl)
		if string(data) != orig {
			t.Fatalf("Event modified its input %q", orig)
		}
		r.Reset()
		tl2 := newTL()
		if ev2 := r.Event(data, tl2); ev2 != ev || !mapsEqual(engineOf(tl), engineOf(tl2)) {
			t.Fatalf("Event(%q) not deterministic after Reset: %+v then %+v", orig, ev, ev2)
		}
		r.Reset()
		if ev3 := r.Event(data, nil); ev3 != ev {
			t.Fatalf("Event(%q) depends on the timeline: %+v vs %+v", orig, ev, ev3)
		}
		if ev.BadUTF8 && !ev.Malformed {
			t.Fatalf("BadUTF8 without Malformed")
		}
		if ev.Malformed {
			rest := ev
			rest.Malformed, rest.BadUTF8 = false, false
			if rest != (Event{}) {
				t.Fatalf("Event(%q): malformed event carries more: %+v", orig, ev)
			}
		}
		if ev.Finish > endreason.FinishOther || ev.EventType > EventOther {
			t.Fatalf("Event(%q): out of range: %+v", orig, ev)
		}
		if !ev.Usage && (ev.PromptTokens != 0 || ev.CompletionTokens != 0) {
			t.Fatalf("Event(%q): token counts without usage", orig)
		}
		if ev.Timing != tl.EngineReported() {
			t.Fatalf("Event(%q): Timing %v but recorded %v", orig, ev.Timing, engineOf(tl))
		}
		if _, q := tl.Engine(stages.EngineQueue); ev.Inferred && (q || !ev.Timing) {
			t.Fatalf("Event(%q): Inferred with a queue reported or no timing", orig)
		}
		for d, v := range engineOf(tl) {
			if v < -maxDur || v > maxDur {
				t.Fatalf("Event(%q) recorded %v = %v", orig, d, v)
			}
		}
		if ev.Decode < 0 || ev.Decode > maxDur {
			t.Fatalf("Event(%q): Decode %v", orig, ev.Decode)
		}
	})
}

func FuzzVLLM(f *testing.F)      { fuzzReader(f, KindVLLM, "vllm", "generic") }
func FuzzLlamaCpp(f *testing.F)  { fuzzReader(f, KindLlamaCpp, "llamacpp") }
func FuzzOllama(f *testing.F)    { fuzzReader(f, KindOllama, "ollama") }
func FuzzSGLang(f *testing.F)    { fuzzReader(f, KindSGLang, "sglang") }
func FuzzTGI(f *testing.F)       { fuzzReader(f, KindTGI, "tgi") }
func FuzzAnthropic(f *testing.F) { fuzzReader(f, KindAnthropic, "anthropic") }
func FuzzReference(f *testing.F) { fuzzReader(f, KindReference, "reference") }

// FuzzGeneric: the generic reader, and the engines it recognises in a
// response.
func FuzzGeneric(f *testing.F) { fuzzReader(f, KindGeneric, "generic", "llamacpp", "vllm", "ollama") }

func FuzzTGIHeaders(f *testing.F) {
	f.Add("37", "2", "380")
	f.Add(" 0 ", "", "")
	f.Add("-1", "NaN", "Inf")
	f.Add("1e400", "86400000", "86400001")
	f.Add("0x10", "1_000", "+5")
	f.Add("0", "0", "110") // testdata/tgi/public_generate_whole.txt
	f.Fuzz(func(t *testing.T, queue, validation, inference string) {
		h := http.Header{}
		h.Set("X-Queue-Time", queue)
		h.Set("X-Validation-Time", validation)
		h.Set("X-Inference-Time", inference)
		var r TGIReader
		tl := newTL()
		ok := r.Header(headerFunc(h), tl)
		got := engineOf(tl)
		if ok != (len(got) > 0) {
			t.Fatalf("Header = %v, recorded %v", ok, got)
		}
		for d, v := range got {
			if d != stages.EngineQueue && d != stages.EngineTokenize {
				t.Fatalf("recorded %v (x-inference-time must not be split)", d)
			}
			if v < 0 || v > maxDur {
				t.Fatalf("%v = %v from %q/%q", d, v, queue, validation)
			}
		}
	})
}

// TestOllamaLoad: load_duration is a model load from ollamaLoadMin on, the
// handler's own work (recv) below it; Ollama never reports a queue.
func TestOllamaLoad(t *testing.T) {
	tests := []struct {
		load  string // load_duration's JSON, "" for none
		which stages.EngineDur
	}{
		{"", stages.NumEngineDurs},
		{"0", stages.EngineRecv},
		{"8791", stages.EngineRecv},
		{"99999999", stages.EngineRecv},
		{"100000000", stages.EngineLoad},
		{"3106878899", stages.EngineLoad},
	}
	for _, tc := range tests {
		line := `{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_duration":5000000`
		if tc.load != "" {
			line += `,"load_duration":` + tc.load
		}
		tl := newTL()
		ev := new(OllamaReader).Event([]byte(line+"}"), tl)
		if !ev.Timing || !ev.Inferred {
			t.Errorf("%s: Timing %v, Inferred %v; want both", tc.load, ev.Timing, ev.Inferred)
		}
		for d := range stages.NumEngineDurs {
			_, ok := tl.Engine(d)
			if want := d == tc.which || d == stages.EnginePrefill; ok != want {
				t.Errorf("load_duration %s: %v recorded %v, want %v", tc.load, d, ok, want)
			}
		}
	}
}
