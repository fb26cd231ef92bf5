package engines

import (
	"bytes"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// Detect names the engine kind behind an upstream, best effort, from what
// it serves; "generic" when unsure. The proxy calls it (proxy/identify.go,
// --engine auto) when an upstream's configuration takes effect, again until
// the upstream answers, and logs the result. h returns a header of any one
// response of the upstream (nil when absent; may be nil itself); modelsBody
// is the body of GET /v1/models (or Ollama's GET /api/tags, or TGI's
// GET /info; nil when not fetched); serverHeader is that response's Server
// header. The rules, first match wins (sources: the engines' code and
// documentation, as cited in testdata/README.md):
//
//  1. A Server-Timing header with a metric of the reference protocol
//     (queue, prefill, …; refengine/PROTOCOL.md) → reference.
//  2. An X-Compute-Type header → tgi (TGI sends it on every generate
//     response, streamed or not: router/src/server.rs).
//  3. Server: llama.cpp → llamacpp (llama-server's default header,
//     tools/server/server.cpp set_default_headers).
//  4. /v1/models data[0].owned_by: "ttftlens" → reference (refengine/server.go),
//     "vllm" → vllm, "llamacpp" → llamacpp, "sglang" → sglang, "library" →
//     ollama (Ollama sets the model name's namespace, "library" for the
//     official models: openai/openai.go ToListCompletion). A data[0] with
//     "type": "model" and "display_name" → anthropic (Anthropic's model list).
//  5. Ollama's /api/tags ({"models": [{"name", "digest", ...}]}) → ollama;
//     TGI's /info ({"model_id", "router": "text-generation-router"}) → tgi.
//  6. Otherwise generic. "Server: uvicorn" alone says nothing (vLLM and
//     SGLang both serve with uvicorn), nor does owned_by of a user namespace
//     on Ollama, or a TGI /v1/models (owned_by is the model's owner).
func Detect(h func(name string) []byte, modelsBody []byte, serverHeader []byte) string {
	if h != nil {
		if st := h("Server-Timing"); len(st) > 0 {
			var tl stages.Timeline
			tl.Start(func() int64 { return 0 }, time.Time{})
			if ParseServerTiming(st, &tl) > 0 {
				return KindReference
			}
		}
		if len(h("X-Compute-Type")) > 0 {
			return KindTGI
		}
	}
	if bytes.HasPrefix(bytes.TrimSpace(serverHeader), []byte("llama.cpp")) {
		return KindLlamaCpp
	}
	if len(modelsBody) == 0 {
		return KindGeneric
	}
	var p jsonParser
	v, err := p.parse(modelsBody)
	if err != nil || v.Type() != jsonObject {
		return KindGeneric
	}
	if data := v.GetArray("data"); len(data) > 0 {
		m := data[0]
		switch string(m.GetStringBytes("owned_by")) {
		case "ttftlens":
			return KindReference
		case "vllm":
			return KindVLLM
		case "llamacpp":
			return KindLlamaCpp
		case "sglang":
			return KindSGLang
		case "library":
			return KindOllama
		}
		if string(m.GetStringBytes("type")) == "model" && m.Get("display_name") != nil {
			return KindAnthropic
		}
	}
	if ms := v.GetArray("models"); len(ms) > 0 && ms[0].Get("digest") != nil && ms[0].Get("name") != nil {
		return KindOllama
	}
	if bytes.Contains(v.GetStringBytes("router"), []byte("text-generation-router")) && v.Get("model_id") != nil {
		return KindTGI
	}
	return KindGeneric
}
