package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/proxy/engines"
)

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1), plus ones the proxy sets itself.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// buildUpstreamRequest copies the client's request into req for the upstream, with
// the trace and request-id headers and without hop-by-hop headers (nor the
// client's key, when the gateway checked it: the key is ours, not the
// engine's; nor the headers only the operator may pass, unless allowed).
func (x *exchange) buildUpstreamRequest(ctx *fasthttp.RequestCtx, req *fasthttp.Request, up *upstream, stripAuth bool) {
	ctx.Request.Header.CopyTo(&req.Header)
	for _, k := range connectionTokens(&ctx.Request.Header) {
		req.Header.DelBytes(k)
	}
	for _, h := range hopByHop {
		req.Header.Del(h)
	}
	if stripAuth {
		req.Header.Del("Authorization")
	}
	if !x.p.cfg.AllowFaults {
		for _, h := range engines.OperatorHeaders() {
			req.Header.Del(h)
		}
	}
	req.Header.ResetConnectionClose()
	req.Header.SetProtocol("HTTP/1.1") // whatever the client spoke
	req.SetRequestURIBytes(ctx.Request.Header.RequestURI())
	req.URI().SetScheme("http")
	if up.hc.IsTLS {
		req.URI().SetScheme("https")
	}
	req.URI().SetHost(up.Addr)
	req.Header.SetHost(up.Addr)
	req.SetBodyRaw(ctx.Request.Body())
	// The relay parses events: ask for them uncompressed.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Request-Id", x.fin.rec.RequestID)
	x.scratch = x.tc.appendTraceparent(x.scratch[:0])
	req.Header.SetBytesV("traceparent", x.scratch)
}

// connectionTokens returns the header names listed in Connection, which are
// hop-by-hop too.
func connectionTokens(h *fasthttp.RequestHeader) [][]byte {
	v := h.Peek("Connection")
	if len(v) == 0 {
		return nil
	}
	var out [][]byte
	for _, t := range bytes.Split(v, []byte(",")) {
		if t = bytes.TrimSpace(t); len(t) > 0 {
			out = append(out, t)
		}
	}
	return out
}

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
