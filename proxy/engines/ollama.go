package engines

import (
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// OllamaReader reads Ollama's native API, /api/chat and /api/generate:
// NDJSON lines when streaming (Content-Type application/x-ndjson; split
// them with LineScanner), one JSON object otherwise (ollama/ollama
// api/types.go, docs/api.md):
//
//   - content: message.content, message.thinking or message.tool_calls
//     (chat); response or thinking (generate). Thinking alone is reasoning
//     (Event.Reasoning).
//   - done: "done": true on the final line; finish from "done_reason"
//     (stop, length; load/unload for empty load and unload calls).
//   - error: a line {"error": "..."} (the status is 200 already).
//   - usage: prompt_eval_count (cached plus evaluated prompt tokens),
//     eval_count, on the final line.
//   - durations, NANOSECONDS, on the final line only:
//     load_duration → EngineQueue: from the handler's start to the
//     scheduler handing over a runner, so the scheduler's pending queue
//     (OLLAMA_MAX_QUEUE), waiting for other models to unload, and loading
//     this one (server/routes.go checkpointStart/checkpointLoaded). The wait
//     for one of OLLAMA_NUM_PARALLEL slots happens later and is not in it.
//     prompt_eval_duration → EnginePrefill (llama-server's prompt_ms).
//     eval_duration → Event.Decode.
//
// The fields are omitempty: a missing one is not reported (an Ollama whose
// final line lacks load_duration gets its queue inferred by InferQueue).
// Ollama's OpenAI-compatible /v1 endpoints carry no timing: use "generic"
// for them, or this reader (it reads OpenAI chunks too).
type OllamaReader struct{}

// Kind returns "ollama".
func (*OllamaReader) Kind() string { return KindOllama }

// Header records nothing: Ollama sends no timing headers.
func (*OllamaReader) Header(h func(string) []byte, tl *stages.Timeline) bool { return noHeader(h, tl) }

// Event reads one NDJSON line (or a whole body).
func (r *OllamaReader) Event(data []byte, tl *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event { return r.read(v, ev, tl) })
}

// read reads a parsed line or body (Event's work, for the generic reader
// too).
func (*OllamaReader) read(v *jsonValue, ev Event, tl *stages.Timeline) Event {
	ev = readOpenAIExt(v, ev)
	if m := v.Get("message"); m != nil && m.Type() == jsonObject {
		ev.add(ollamaOutput(len(m.GetStringBytes("content")) > 0 || len(m.GetArray("tool_calls")) > 0, m))
	}
	ev.add(ollamaOutput(len(v.GetStringBytes("response")) > 0, v))
	if !v.GetBool("done") {
		return ev
	}
	ev.Done = true
	if f := endreason.ParseFinish(v.GetStringBytes("done_reason")); f != endreason.FinishNone {
		ev.Finish = f
	}
	p, okp := intField(v, "prompt_eval_count")
	c, okc := intField(v, "eval_count")
	if okp || okc {
		ev.Usage, ev.PromptTokens, ev.CompletionTokens = true, p, c
	}
	ollamaDurations.read(v, tl, &ev)
	return ev
}

// ollamaDurations are the durations of Ollama's last line.
var ollamaDurations = durationFields{queue: "load_duration", prefill: "prompt_eval_duration", decode: "eval_duration", unit: time.Nanosecond}

// Reset does nothing: the reader keeps no per-request state.
func (*OllamaReader) Reset() {}

// ollamaOutput is the output of a chat message or a generate line: answer
// when it has any, otherwise reasoning when its thinking is not empty.
func ollamaOutput(answer bool, v *jsonValue) output {
	switch {
	case answer:
		return outAnswer
	case len(v.GetStringBytes("thinking")) > 0:
		return outReasoning
	}
	return 0
}
