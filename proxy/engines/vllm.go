package engines

import (
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// VLLMReader reads vLLM's OpenAI-compatible server. With the server flag
// --enable-per-request-metrics, the final usage chunk (choices [], sent
// after the last content chunk and before [DONE], only when usage is
// requested: stream_options.include_usage, or --enable-force-include-usage)
// or the whole non-streamed body carries a "metrics" object
// (vllm-project/vllm docs/features/per_request_metrics.md):
//
//   - metrics.queue_time_ms (ms, may be null) → EngineQueue
//   - metrics.time_to_first_token_ms (ms) → EnginePrefill
//   - metrics.generation_time_ms (ms, first to last output token) → Event.Decode
//
// time_to_first_token_ms is measured from when the request was scheduled to
// its first token: every prefill chunk plus the sampling of the first token,
// queue excluded. It goes to prefill, not to first_decode, because no engine
// separates a first decode step: the first token is sampled at the end of
// the last prefill forward pass, so the whole
// interval is the engine's prefill and first_decode stays unreported.
// Null values are not reported; 0 is a measurement. A null queue with a
// prefill sets Event.Inferred: InferQueue infers the queue at done. metrics is null for
// n > 1 and omitted for multi-prompt completions: nothing is recorded then.
type VLLMReader struct{}

// Kind returns "vllm".
func (*VLLMReader) Kind() string { return KindVLLM }

// Header records nothing: vLLM sends no timing headers (only X-Request-Id).
func (*VLLMReader) Header(h func(string) []byte, tl *stages.Timeline) bool { return noHeader(h, tl) }

// Event reads an OpenAI-compatible chunk or body, and its metrics.
func (r *VLLMReader) Event(data []byte, tl *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event { return r.read(v, ev, tl) })
}

// read reads a parsed chunk or body (Event's work, for the generic reader
// too).
func (*VLLMReader) read(v *jsonValue, ev Event, tl *stages.Timeline) Event {
	ev = readOpenAIExt(v, ev)
	m := v.Get("metrics")
	if m == nil || m.Type() != jsonObject {
		return ev
	}
	vllmDurations.read(m, tl, &ev)
	return ev
}

// vllmDurations are the durations in vLLM's metrics object; a null queue
// is inferred at done.
var vllmDurations = durationFields{queue: "queue_time_ms", prefill: "time_to_first_token_ms", decode: "generation_time_ms", unit: time.Millisecond}

// Reset does nothing: the reader keeps no per-request state.
func (*VLLMReader) Reset() {}

// IsUsageOnlyChunk reports whether data is an OpenAI usage-only chunk:
// "choices" an empty array and "usage" an object. It is the chunk
// include_usage adds before [DONE]; the relay drops it when it added the
// option itself (after the reader has read it: with vLLM it carries the
// metrics). Event.UsageOnly says the same without parsing again.
func IsUsageOnlyChunk(data []byte) bool {
	p := jsonParsers.Get().(*jsonParser)
	defer jsonParsers.Put(p)
	v, err := p.parse(data)
	if err != nil || v.Type() != jsonObject {
		return false
	}
	c := v.Get("choices")
	u := v.Get("usage")
	return c != nil && c.Type() == jsonArray && len(c.GetArray()) == 0 &&
		u != nil && u.Type() == jsonObject
}
