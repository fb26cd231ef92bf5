package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/proxy/engines"
)

// copyResponseHeaders copies the upstream's end-to-end headers to the
// client; the engine's timing headers only when configured to pass them.
func (x *exchange) copyResponseHeaders(ctx *fasthttp.RequestCtx) {
	dst := &ctx.Response.Header
	for k, v := range x.resp.Header.All() {
		switch {
		case skipResponseHeader(k):
		case !x.p.cfg.PassEngineTiming && engines.IsTimingHeader(k):
		default:
			dst.AddBytesKV(k, v)
		}
	}
	dst.SetContentTypeBytes(x.resp.Header.ContentType())
	dst.Set("X-Request-Id", x.fin.rec.RequestID)
}

func skipResponseHeader(k []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(k, []byte(h)) {
			return true
		}
	}
	return bytes.EqualFold(k, []byte("Content-Length")) || bytes.EqualFold(k, []byte("Content-Type")) ||
		bytes.EqualFold(k, []byte("Date")) || bytes.EqualFold(k, []byte("Server"))
}

// isEventStream reports an SSE stream.
func isEventStream(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	return bytes.EqualFold(bytes.TrimSpace(mt), []byte("text/event-stream"))
}

// isNDJSON reports a newline-delimited JSON stream (Ollama's native API).
func isNDJSON(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.TrimSpace(mt)
	return bytes.EqualFold(mt, []byte("application/x-ndjson")) || bytes.EqualFold(mt, []byte("application/jsonl"))
}
