package engines

import (
	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// LlamaCppReader reads llama.cpp's llama-server: OpenAI-compatible chat and
// completion streams, and its native /completion stream. The "timings"
// object arrives on the final chunk always, and on every chunk when the
// request sets "timings_per_token": true (ggml-org/llama.cpp
// tools/server/server-task.cpp, result_timings::to_json):
//
//   - timings.prompt_ms (ms, float) → EnginePrefill: from the slot starting
//     the prompt to the first sampled token, so prefill plus the first
//     sample; it excludes waiting for a slot, HTTP and tokenization. It is
//     read from the first chunk whose timings count a generated token
//     (predicted_n ≥ 1), wherever the engine put it: that chunk's value is
//     final, so later chunks (every chunk with timings_per_token) are not
//     read again. Timings with no generated token yet (a prompt-progress
//     chunk's, whose prompt_ms is still running) are recorded until then.
//   - timings.cache_n → Event.CachedTokens; timings.prompt_n (tokens
//     evaluated) is the rest of the prompt.
//   - timings.predicted_ms (ms) → Event.Decode, from every chunk: it grows
//     with each token.
//   - timings.draft_n, draft_n_accepted (speculative decoding) are not read.
//
// llama.cpp reports no queue: events that record the prefill set
// Event.Inferred, and the relay's InferQueue at done records EngineQueue =
// (FirstToken − UpstreamSent) − EnginePrefill, which also holds the slot
// wait, the network and the server's HTTP handling. It is done at the end
// rather than on the chunk with the prefill so that it also works for a
// whole body (read before the proxy marks its first token).
//
// With --reasoning-format deepseek (and auto, for templates that think) the
// model's thinking streams as delta.reasoning_content before the answer's
// delta.content (Event.Reasoning); with none it stays in content and
// cannot be told apart.
//
// The native /completion stream sends "content" and, on its last event,
// "stop": true with "stop_type" (eos, word, limit), "tokens_evaluated" and
// "tokens_predicted"; they map to content, finish and usage.
type LlamaCppReader struct {
	// prefillFinal: a chunk's timings counted a generated token, so the
	// prefill recorded is final.
	prefillFinal bool
}

// Kind returns "llamacpp".
func (*LlamaCppReader) Kind() string { return KindLlamaCpp }

// Header records nothing: llama-server sends no timing headers.
func (*LlamaCppReader) Header(h func(string) []byte, tl *stages.Timeline) bool {
	return noHeader(h, tl)
}

// Event reads a chunk or body and its timings.
func (r *LlamaCppReader) Event(data []byte, tl *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event { return r.read(v, ev, tl) })
}

// read reads a parsed chunk or body (Event's work, for the generic reader
// too).
func (r *LlamaCppReader) read(v *jsonValue, ev Event, tl *stages.Timeline) Event {
	ev = readOpenAIExt(v, ev)
	// Native /completion.
	if len(v.GetStringBytes("content")) > 0 {
		ev.add(outAnswer)
	}
	if v.GetBool("stop") {
		if f := endreason.ParseFinish(v.GetStringBytes("stop_type")); f != endreason.FinishNone {
			ev.Finish = f
		}
		p, okp := intField(v, "tokens_evaluated")
		c, okc := intField(v, "tokens_predicted")
		if !ev.Usage && (okp || okc) {
			ev.Usage, ev.PromptTokens, ev.CompletionTokens = true, p, c
		}
	}
	t := v.Get("timings")
	if t == nil || t.Type() != jsonObject {
		return ev
	}
	const ms = 1e6 // nanoseconds
	if d, ok := durField(t, "prompt_ms", ms); ok && !r.prefillFinal {
		setEngine(tl, stages.EnginePrefill, d)
		ev.Timing, ev.Inferred = true, true
		n, _ := intField(t, "predicted_n")
		r.prefillFinal = n > 0
	}
	ev.CachedTokens, ev.Cached = intField(t, "cache_n")
	if d, ok := durField(t, "predicted_ms", ms); ok && d > 0 {
		ev.Decode = d
	}
	return ev
}

// Reset forgets the request's prefill.
func (r *LlamaCppReader) Reset() { r.prefillFinal = false }
