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
//     load_duration: from the handler's start (before it decodes the
//     request) to the scheduler handing over a runner (server/routes.go
//     checkpointStart, checkpointLoaded; server/sched.go GetRunner). Warm,
//     that is the handler reading the request, the model's manifest and a
//     health ping of the loaded runner: milliseconds, → EngineRecv. When
//     the model had to be loaded (a runner process started, the weights
//     read), or the request waited for a load under way (it waits on the
//     runner's lock), it is that load: at least ollamaLoadMin, → EngineLoad.
//     The response says nothing else about a load: its size is the sign.
//     prompt_eval_duration → EnginePrefill (llama-server's prompt_ms).
//     eval_duration → Event.Decode.
//   - no queue: the wait for one of OLLAMA_NUM_PARALLEL slots (a semaphore
//     in the runner's client, llm/server.go Completion) comes after
//     load_duration and is in none of the durations. Event.Inferred is set,
//     and InferQueue infers the queue at done.
//
// The fields are omitempty: a missing one is not reported.
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
	ollamaLoad(v, tl, &ev)
	return ev
}

// ollamaDurations are the durations of Ollama's last line; it has no queue
// (load_duration is read by ollamaLoad).
var ollamaDurations = durationFields{prefill: "prompt_eval_duration", decode: "eval_duration", unit: time.Nanosecond}

// ollamaLoadMin is the shortest load_duration read as a model load. Warm,
// load_duration is the handler's own work and a local health ping (a few
// ms to a few tens of ms: 64.5 ms in testdata/ollama/public_chat_stream.txt
// on Windows); a load starts a runner process and reads the weights into
// memory (280-300 ms for a small model on a fast machine, seconds for most;
// 3.1 s in public_chat_whole.txt).
const ollamaLoadMin = 100 * time.Millisecond

// ollamaLoad records load_duration in v: EngineLoad when it is a model load
// (ollamaLoadMin or more), EngineRecv otherwise.
func ollamaLoad(v *jsonValue, tl *stages.Timeline, ev *Event) {
	d, ok := durField(v, "load_duration", time.Nanosecond)
	if !ok {
		return
	}
	which := stages.EngineRecv
	if d >= ollamaLoadMin {
		which = stages.EngineLoad
	}
	setEngine(tl, which, d)
	ev.Timing = true
}

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
