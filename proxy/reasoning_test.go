package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// TestReasoningFirstAnswer streams a reasoning model through the proxy:
// reasoning deltas, then (once the client has read them all) the answer.
// TTFT stays at the first token of any kind; the first answer is marked
// where the answer reached the client, after it; the reasoning is counted.
func TestReasoningFirstAnswer(t *testing.T) {
	const (
		llamacppTimings = `,"timings":{"cache_n":7,"prompt_n":10,"prompt_ms":251.51,"predicted_n":19,"predicted_ms":271.89,"draft_n":20,"draft_n_accepted":8}`
		usage           = `{"choices":[],"usage":{"prompt_tokens":13,"completion_tokens":412,"total_tokens":425,"completion_tokens_details":{"reasoning_tokens":398}}}`
	)
	tests := []struct {
		name      string
		engine    string
		reasoning []string // events sent before the client has read them
		answer    []string // events sent after
		tokensOut int
		reasoned  int
		answered  bool          // a first answer reached the client
		prefill   time.Duration // the engine's, 0 when it reports none
	}{
		{"llama.cpp reasoning_content", "llamacpp",
			deltas(5, "reasoning_content", llamacppTimings), deltas(3, "content", llamacppTimings), 8, 5, true, 251510 * time.Microsecond},
		{"vLLM reasoning, usage counts it", "",
			deltas(5, "reasoning", ""), append(deltas(3, "content", ""), usage), 412, 398, true, 0},
		{"DeepSeek reasoning_content, then a tool call", "",
			[]string{`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"}}]}`},
			[]string{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}`}, 2, 1, true, 0},
		{"no reasoning", "", nil, deltas(3, "content", ""), 3, 0, true, 0},
		{"cut while reasoning", "", deltas(4, "reasoning_content", ""), nil, 4, 4, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			readReasoning := make(chan struct{})
			up := startUpstream(t, func(c *upConn) {
				c.role()
				for _, e := range tc.reasoning {
					c.event(e)
				}
				if len(tc.reasoning) > 0 {
					<-readReasoning
				}
				for _, e := range tc.answer {
					c.event(e)
				}
				if tc.answered {
					c.finish("stop")
				} else {
					c.finish("length")
				}
				c.done()
				c.end()
			})
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.Engine = tc.engine })
			_, br := rawClient(t, addr, chatBody)
			if len(tc.reasoning) > 0 {
				readUntil(t, br, tc.reasoning[len(tc.reasoning)-1])
				close(readReasoning)
			}
			readUntil(t, br, "data: [DONE]")

			r := sink.next(t)
			if r.Reason != endreason.Stop && r.Reason != endreason.Length {
				t.Fatalf("record %s/%s (%s)", r.Reason, r.Detail, r.Error)
			}
			if r.TokensOut != tc.tokensOut || r.ReasoningTokens != tc.reasoned {
				t.Errorf("tokens_out %d, reasoning_tokens %d; want %d, %d", r.TokensOut, r.ReasoningTokens, tc.tokensOut, tc.reasoned)
			}
			tl := &r.Timeline
			first, _ := tl.At(stages.FirstToken)
			flushed, _ := tl.At(stages.FirstTokenFlushed)
			answer, answered := tl.At(stages.FirstAnswer)
			if !r.bd.OK || r.bd.TTFT != flushed || first > flushed {
				t.Fatalf("TTFT %v (ok %v): first token %v, flushed %v", r.bd.TTFT, r.bd.OK, first, flushed)
			}
			switch {
			case answered != tc.answered:
				t.Errorf("first answer marked %v, want %v", answered, tc.answered)
			case !answered:
			case len(tc.reasoning) == 0 && answer != flushed:
				t.Errorf("first answer %v, want the first token's moment %v: nothing was reasoned", answer, flushed)
			case len(tc.reasoning) > 0 && !(flushed < answer):
				t.Errorf("first answer %v not after the first token %v", answer, flushed)
			}
			if last, _ := tl.At(stages.LastToken); last < first {
				t.Errorf("last token %v before the first %v", last, first)
			}
			if got, _ := tl.Engine(stages.EnginePrefill); got != tc.prefill {
				t.Errorf("engine prefill %v, want %v", got, tc.prefill)
			}
		})
	}
}

// deltas returns n chat chunks whose delta sets field to a text of its own
// (field0, field1, …), with extra appended to each chunk's members.
func deltas(n int, field, extra string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"choices":[{"index":0,"delta":{"%s":"%s%d"}}]%s}`, field, field, i, extra)
	}
	return out
}

// TestReasoningWholeBody: a non-streamed body with reasoning and an answer
// is one event: its first token and first answer are the same moment, and
// the usage's reasoning count is kept.
func TestReasoningWholeBody(t *testing.T) {
	body := `{"id":"c","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"9.8","reasoning_content":"Compare the tenths."},"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":40,"total_tokens":53,"completion_tokens_details":{"reasoning_tokens":31}}}`
	up := startUpstream(t, func(c *upConn) { c.whole(200, "application/json", body) })
	addr, sink, _ := startProxy(t, up.url, nil)
	resp, got, err := post(t, addr, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if err != nil || resp.StatusCode != 200 || got != body {
		t.Fatalf("status %d err %v body %q", resp.StatusCode, err, got)
	}
	r := sink.next(t)
	flushed, _ := r.Timeline.At(stages.FirstTokenFlushed)
	answer, ok := r.Timeline.At(stages.FirstAnswer)
	if !ok || answer != flushed || r.TokensOut != 40 || r.ReasoningTokens != 31 {
		t.Errorf("first answer %v (%v), first token flushed %v, tokens_out %d, reasoning_tokens %d; want the same moment, 40, 31",
			answer, ok, flushed, r.TokensOut, r.ReasoningTokens)
	}
}
