// Package signals reads what upstream responses say about a request: whether
// an event carries generated content, how generation finished, token usage,
// errors, and the engine's own timing. One file per protocol or engine kind.
// Readers allocate nothing per event once warm.
package signals

import (
	"bytes"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/endreason"
)

// Event is what one upstream event said.
type Event struct {
	// Content: the event carries generated output (text, tool-call deltas,
	// reasoning). A role-only chunk with empty content does not.
	Content bool
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
}

// OpenAI reads OpenAI-compatible chat and text completion chunks, streamed
// or whole. Not safe for concurrent use; reuse one per request.
type OpenAI struct {
	p fastjson.Parser
}

var doneMarker = []byte("[DONE]")

// Inspect reads one event's data (the SSE data field, or a whole
// non-streamed response body).
func (o *OpenAI) Inspect(data []byte) Event {
	var ev Event
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, doneMarker) {
		ev.Done = true
		return ev
	}
	if !utf8.Valid(data) {
		ev.Malformed, ev.BadUTF8 = true, true
		return ev
	}
	v, err := o.p.ParseBytes(data)
	if err != nil || v.Type() != fastjson.TypeObject {
		ev.Malformed = true
		return ev
	}
	if e := v.Get("error"); e != nil && e.Type() != fastjson.TypeNull {
		ev.Error = true
	}
	for _, c := range v.GetArray("choices") {
		if d := c.Get("delta"); d != nil {
			ev.Content = ev.Content || hasOutput(d)
		} else if m := c.Get("message"); m != nil {
			ev.Content = ev.Content || hasOutput(m)
		}
		if len(c.GetStringBytes("text")) > 0 {
			ev.Content = true
		}
		if f := endreason.ParseFinish(c.GetStringBytes("finish_reason")); f != endreason.FinishNone {
			ev.Finish = f
		}
	}
	if u := v.Get("usage"); u != nil && u.Type() == fastjson.TypeObject {
		ev.Usage = true
		ev.PromptTokens = u.GetInt("prompt_tokens")
		ev.CompletionTokens = u.GetInt("completion_tokens")
	}
	return ev
}

// hasOutput reports whether a delta or message carries generated output.
func hasOutput(m *fastjson.Value) bool {
	return len(m.GetStringBytes("content")) > 0 ||
		len(m.GetArray("tool_calls")) > 0 ||
		len(m.GetStringBytes("reasoning_content")) > 0 ||
		len(m.GetStringBytes("reasoning")) > 0
}
