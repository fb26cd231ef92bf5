// Package engines reads what upstream responses say about a request: whether
// an event carries generated content, how generation finished, token usage,
// errors, and the engine's own timing. One file per protocol or engine kind.
// Readers allocate nothing per event once warm.
package engines

import (
	"bytes"
	"time"
	"unicode/utf8"

	"github.com/ttftlens/ttftlens/endreason"
)

// Event is what one upstream event said.
type Event struct {
	// Content: the event carries generated output (text, tool-call deltas,
	// reasoning). A role-only chunk with empty content does not.
	Content bool
	// Reasoning: all the generated output the event carries is reasoning
	// (the model thinking before it answers: OpenAI-compatible
	// reasoning_content or reasoning, Ollama's and Anthropic's thinking);
	// false with any answer output (text, tool call) beside it.
	Reasoning bool
	// Finish is the finish reason the event carried (FinishNone if none).
	Finish endreason.Finish
	// Done: the stream's end marker.
	Done bool
	// Error: the event is an error object.
	Error bool
	// Usage: token counts were reported.
	Usage            bool
	PromptTokens     int
	CompletionTokens int
	// Malformed: the data is not valid JSON (or not UTF-8); BadUTF8 says which.
	Malformed bool
	BadUTF8   bool

	// The fields below are set by the engine readers (Reader.Event), never
	// by OpenAI.Inspect.

	// Timing: the event carried engine durations, and the reader recorded
	// them on the Timeline.
	Timing bool
	// Inferred: the engine reports prefill but no queue for this request
	// (llama.cpp, Ollama, or SGLang/vLLM when their queue field is
	// missing), so the queue must be inferred at the end of the response:
	// call InferQueue. The durations recorded from this event are measured.
	Inferred bool
	// EventType is the Anthropic Messages event kind (the data's "type");
	// EventNone for every other protocol.
	EventType EventType
	// CachedTokens: prompt tokens served from the engine's prefix cache,
	// when the engine says (Cached: with Usage, or llama.cpp's
	// timings.cache_n); a reported 0 is a miss.
	CachedTokens int
	Cached       bool
	// UsageOnly: an OpenAI usage-only chunk (choices [] and a usage
	// object): the chunk the relay drops when it added include_usage
	// upstream (see EnsureIncludeUsage).
	UsageOnly bool
	// ReasoningUsage: the usage said how many of the completion tokens
	// were reasoning (OpenAI-compatible
	// usage.completion_tokens_details.reasoning_tokens): ReasoningTokens.
	ReasoningUsage  bool
	ReasoningTokens int
	// Decode is the engine's own generation time after the first token
	// (vLLM generation_time_ms, llama.cpp predicted_ms, Ollama
	// eval_duration), when reported; zero otherwise. Informative: no
	// stage of time to first token uses it.
	Decode time.Duration
}

// Answer reports that the event carries answer output: generated output
// that is not reasoning only. The first such event is where the answer a
// user reads begins.
func (e Event) Answer() bool { return e.Content && !e.Reasoning }

// output is the generated output a message, delta or line carries.
type output uint8

const (
	outAnswer    output = 1 << iota // text, tool calls
	outReasoning                    // the model's reasoning before its answer
)

// add folds output o into e: Content when there is any, Reasoning while
// all of it is reasoning.
func (e *Event) add(o output) {
	if o == 0 {
		return
	}
	e.Reasoning = (e.Reasoning || !e.Content) && o == outReasoning
	e.Content = true
}

// OpenAI reads OpenAI-compatible chat and text completion chunks, streamed
// or whole. It keeps nothing between events.
type OpenAI struct{}

var doneMarker = []byte("[DONE]")

// Inspect reads one event's data (the SSE data field, or a whole
// non-streamed response body).
func (*OpenAI) Inspect(data []byte) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event {
		readOpenAI(v, &ev)
		return ev
	})
}

// readEvent reads one event's data with a pooled parser: parseEvent's
// checks, then, when the data is a JSON object, read's (a protocol's
// fields, added to ev). v is valid only during read. Event is passed by
// value, not by pointer, so that it stays on the stack: nothing allocates.
func readEvent(data []byte, read func(v *jsonValue, ev Event) Event) Event {
	parser := jsonParsers.Get().(*jsonParser)
	defer jsonParsers.Put(parser)
	ev, v := parseEvent(parser, data)
	if v == nil {
		return ev
	}
	return read(v, ev)
}

// parseEvent handles what every protocol shares: the [DONE] marker, UTF-8
// validity and JSON syntax. It returns the parsed object, or nil with the
// event already complete (Done or Malformed). The value is valid until p
// parses again or goes back to jsonParsers.
func parseEvent(p *jsonParser, data []byte) (Event, *jsonValue) {
	var ev Event
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, doneMarker) {
		ev.Done = true
		return ev, nil
	}
	if !utf8.Valid(data) {
		ev.Malformed, ev.BadUTF8 = true, true
		return ev, nil
	}
	v, err := p.parse(data)
	if err != nil || v.Type() != jsonObject {
		ev.Malformed = true
		return ev, nil
	}
	return ev, v
}

// readOpenAI reads the OpenAI-compatible fields of a chunk or body: error,
// content, finish reason and usage. These are Inspect's semantics exactly.
func readOpenAI(v *jsonValue, ev *Event) {
	if e := v.Get("error"); e != nil && e.Type() != jsonNull {
		ev.Error = true
	}
	for _, c := range v.GetArray("choices") {
		if d := c.Get("delta"); d != nil {
			ev.add(messageOutput(d))
		} else if m := c.Get("message"); m != nil {
			ev.add(messageOutput(m))
		}
		if len(c.GetStringBytes("text")) > 0 {
			ev.add(outAnswer)
		}
		if f := endreason.ParseFinish(c.GetStringBytes("finish_reason")); f != endreason.FinishNone {
			ev.Finish = f
		}
	}
	if u := v.Get("usage"); u != nil && u.Type() == jsonObject {
		ev.Usage = true
		ev.PromptTokens = u.GetInt("prompt_tokens")
		ev.CompletionTokens = u.GetInt("completion_tokens")
	}
}

// readOpenAIExt reads the OpenAI-compatible fields the engine readers add
// to Inspect's: cached prompt tokens and the usage-only chunk.
func readOpenAIExt(v *jsonValue, ev Event) Event {
	readOpenAI(v, &ev)
	if !ev.Usage {
		return ev
	}
	if d := v.Get("usage", "prompt_tokens_details"); d != nil && d.Type() == jsonObject {
		ev.CachedTokens, ev.Cached = intField(d, "cached_tokens")
	}
	if d := v.Get("usage", "completion_tokens_details"); d != nil {
		ev.ReasoningTokens, ev.ReasoningUsage = intField(d, "reasoning_tokens")
	}
	if c := v.Get("choices"); c != nil && c.Type() == jsonArray && len(c.GetArray()) == 0 {
		ev.UsageOnly = true
	}
	return ev
}

// messageOutput is the output a chat delta or message carries: answer
// (content, tool_calls), reasoning (reasoning_content: llama.cpp, DeepSeek's
// API, vLLM before it was renamed; reasoning: vLLM since), or answer when it
// has both. Reasoning is looked at only when there is no answer.
func messageOutput(m *jsonValue) output {
	switch {
	case len(m.GetStringBytes("content")) > 0 || len(m.GetArray("tool_calls")) > 0:
		return outAnswer
	case len(m.GetStringBytes("reasoning_content")) > 0 || len(m.GetStringBytes("reasoning")) > 0:
		return outReasoning
	}
	return 0
}
