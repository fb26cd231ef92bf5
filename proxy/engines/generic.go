package engines

import "github.com/ttftlens/ttftlens/stages"

// GenericReader reads any OpenAI-compatible server that says nothing about
// its own timing (TRT-LLM, Triton, NIM, Ollama's /v1, SGLang's /v1, hosted
// APIs): the upstream window stays unsplit. It is also the reader of an
// upstream whose engine is not identified yet (--engine auto, before
// /v1/models answered), so a response that says which engine sent it, by
// fields no other engine sends, is read from that event on with that
// engine's reader, and Recognised names it:
//
//   - a "timings" object with prompt_ms or predicted_ms, or a native
//     /completion chunk (with "id_slot" and "stop"): llama.cpp's
//     llama-server (see LlamaCppReader);
//   - a "metrics" object with time_to_first_token_ms or queue_time_ms:
//     vLLM's per-request metrics (VLLMReader);
//   - a final line ("done": true) with prompt_eval_duration or
//     load_duration: Ollama's native API (OllamaReader).
//
// Each of those engines reports its durations in the event that identifies
// it (llama.cpp's final chunk, or every chunk with timings_per_token;
// vLLM's usage chunk; Ollama's last line), so nothing it reports is missed.
// Server-Timing needs no engine: Report reads it for every kind.
type GenericReader struct {
	as     string // the kind the response showed itself to be; "" while none
	llama  LlamaCppReader
	vllm   VLLMReader
	ollama OllamaReader
}

// Kind returns "generic".
func (*GenericReader) Kind() string { return KindGeneric }

// Header records nothing.
func (*GenericReader) Header(h func(string) []byte, tl *stages.Timeline) bool { return noHeader(h, tl) }

// Event reads an OpenAI-compatible chunk or body, or, once the response
// showed which engine sent it, reads it as that engine's reader does.
func (r *GenericReader) Event(data []byte, tl *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event {
		if r.as == "" {
			r.as = recognise(v)
		}
		switch r.as {
		case KindLlamaCpp:
			return r.llama.read(v, ev, tl)
		case KindVLLM:
			return r.vllm.read(v, ev, tl)
		case KindOllama:
			return r.ollama.read(v, ev, tl)
		}
		return readOpenAIExt(v, ev)
	})
}

// Recognised names the engine kind the response showed itself to be
// (llamacpp, vllm, ollama), "" while it did not.
func (r *GenericReader) Recognised() string { return r.as }

// Reset forgets the request's engine and what its reader kept.
func (r *GenericReader) Reset() { *r = GenericReader{} }

// recognise names the engine whose own fields v carries, "" for none.
func recognise(v *jsonValue) string {
	if t := v.Get("timings"); t != nil && t.Type() == jsonObject && (t.Get("prompt_ms") != nil || t.Get("predicted_ms") != nil) ||
		v.Get("id_slot") != nil && v.Get("stop") != nil {
		return KindLlamaCpp
	}
	if m := v.Get("metrics"); m != nil && m.Type() == jsonObject && (m.Get("time_to_first_token_ms") != nil || m.Get("queue_time_ms") != nil) {
		return KindVLLM
	}
	if v.GetBool("done") && (v.Get("prompt_eval_duration") != nil || v.Get("load_duration") != nil) {
		return KindOllama
	}
	return ""
}
