package proxy

import "github.com/valyala/fasthttp"

// health answers /health, the readiness probe: 200 while the gateway has
// an upstream in rotation, 503 when it has none, and the body says which
// upstreams are out and why (gateway.Snapshot.AppendHealth).
func (p *Proxy) health(ctx *fasthttp.RequestCtx) {
	body, ready := p.gw.Snapshot().AppendHealth(nil)
	if !ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
