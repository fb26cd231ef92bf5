package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/proxy/engines"
)

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1).
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ownHeaders are the headers the proxy sets itself. Every copy the client
// sent is deleted first: fasthttp's Set replaces only the first, so a
// client's second traceparent would go upstream beside ours.
var ownHeaders = []string{"Accept-Encoding", "X-Request-Id", "Traceparent"}

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
	for _, h := range ownHeaders {
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
