package engines

import (
	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// AnthropicReader reads the Anthropic Messages API (and llama.cpp's
// /v1/messages, which emits the same shape): SSE events named by "event:",
// whose data repeats the name in its "type" field, which is what this
// reader reads (docs.anthropic.com/en/api/messages-streaming):
//
//	message_start        message.usage.input_tokens (+ cache_creation_input_tokens,
//	                     cache_read_input_tokens) remembered for message_delta
//	content_block_start  content when the block is a tool_use / server_tool_use
//	                     (the model chose a tool: like OpenAI's first tool_calls delta),
//	                     or starts with non-empty text / thinking
//	content_block_delta  content when delta is text_delta (text), input_json_delta
//	                     (partial_json) or thinking_delta (thinking) and non-empty;
//	                     thinking is reasoning (Event.Reasoning);
//	                     signature_delta and citations_delta are not content
//	content_block_stop   —
//	message_delta        finish from delta.stop_reason; usage: cumulative
//	                     usage.output_tokens, with the input tokens of message_start
//	                     (or usage.input_tokens when this event has it)
//	message_stop         done (there is no [DONE])
//	ping                 ignored
//	error                error ({"type":"error","error":{"type":"overloaded_error",...}})
//	anything else        ignored (new types may be added), EventOther
//
// Stop reasons: end_turn, stop_sequence → stop; max_tokens,
// model_context_window_exceeded → length; tool_use → tool_calls; refusal →
// content_filter; pause_turn → other (a clean stop the client continues).
// PromptTokens is the whole prompt (input + cache creation + cache read, as
// OpenAI's prompt_tokens counts it); CachedTokens the cache reads. A whole
// non-streamed Message ("type":"message") is read the same way. No timing.
type AnthropicReader struct {
	prompt, cached int // of message_start, for message_delta
	cachedKnown    bool
}

// Kind returns "anthropic".
func (*AnthropicReader) Kind() string { return KindAnthropic }

// Header records nothing: the API sends no engine timing.
func (*AnthropicReader) Header(h func(string) []byte, tl *stages.Timeline) bool {
	return noHeader(h, tl)
}

// Event reads one event's data (or a whole Message body).
func (r *AnthropicReader) Event(data []byte, _ *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event {
		if e := v.Get("error"); e != nil && e.Type() != jsonNull {
			ev.Error = true
		}
		switch string(v.GetStringBytes("type")) {
		case "message_start":
			ev.EventType = EventMessageStart
			r.usage(v.Get("message", "usage"))
		case "content_block_start":
			ev.EventType = EventContentBlockStart
			ev.add(blockOutput(v.Get("content_block")))
		case "content_block_delta":
			ev.EventType = EventContentBlockDelta
			if d := v.Get("delta"); d != nil {
				switch string(d.GetStringBytes("type")) {
				case "text_delta":
					ev.add(outputIf(len(d.GetStringBytes("text")) > 0, outAnswer))
				case "input_json_delta":
					ev.add(outputIf(len(d.GetStringBytes("partial_json")) > 0, outAnswer))
				case "thinking_delta":
					ev.add(outputIf(len(d.GetStringBytes("thinking")) > 0, outReasoning))
				}
			}
		case "content_block_stop":
			ev.EventType = EventContentBlockStop
		case "message_delta":
			ev.EventType = EventMessageDelta
			ev.Finish = stopReason(v.GetStringBytes("delta", "stop_reason"))
			r.report(v.Get("usage"), &ev)
		case "message_stop":
			ev.EventType = EventMessageStop
			ev.Done = true
		case "ping":
			ev.EventType = EventPing
		case "error":
			ev.EventType = EventError
			ev.Error = true
		case "message":
			ev.EventType = EventMessage
			for _, b := range v.GetArray("content") {
				ev.add(blockOutput(b))
			}
			ev.Finish = stopReason(v.GetStringBytes("stop_reason"))
			u := v.Get("usage")
			r.usage(u)
			r.report(u, &ev)
		default:
			ev.EventType = EventOther
		}
		return ev
	})
}

// usage remembers the prompt counts of a usage object.
func (r *AnthropicReader) usage(u *jsonValue) {
	if u == nil || u.Type() != jsonObject {
		return
	}
	in, ok := intField(u, "input_tokens")
	if !ok {
		return
	}
	created, _ := intField(u, "cache_creation_input_tokens")
	read, known := intField(u, "cache_read_input_tokens")
	r.prompt, r.cached, r.cachedKnown = in+created+read, read, known
}

// report fills the event's usage from a message_delta (or Message) usage.
func (r *AnthropicReader) report(u *jsonValue, ev *Event) {
	if u == nil || u.Type() != jsonObject {
		return
	}
	out, ok := intField(u, "output_tokens")
	if !ok {
		return
	}
	r.usage(u) // a message_delta may repeat the (cumulative) input counts
	ev.Usage, ev.CompletionTokens = true, out
	ev.PromptTokens, ev.CachedTokens, ev.Cached = r.prompt, r.cached, r.cachedKnown
}

// blockOutput is the output a content block, as started or as a whole,
// carries: a tool use or text is answer, thinking is reasoning.
func blockOutput(b *jsonValue) output {
	if b == nil {
		return 0
	}
	switch string(b.GetStringBytes("type")) {
	case "tool_use", "server_tool_use":
		return outAnswer
	case "text":
		return outputIf(len(b.GetStringBytes("text")) > 0, outAnswer)
	case "thinking":
		return outputIf(len(b.GetStringBytes("thinking")) > 0, outReasoning)
	}
	return 0
}

// outputIf is o when there is some (the text it stands for is not empty).
func outputIf(some bool, o output) output {
	if some {
		return o
	}
	return 0
}

// stopReason maps an Anthropic stop_reason to a Finish.
func stopReason(v []byte) endreason.Finish {
	switch string(v) {
	case "model_context_window_exceeded":
		return endreason.FinishLength
	case "pause_turn":
		return endreason.FinishOther
	}
	return endreason.ParseFinish(v)
}

// Reset forgets the prompt counts.
func (r *AnthropicReader) Reset() {
	r.prompt, r.cached, r.cachedKnown = 0, 0, false
}
