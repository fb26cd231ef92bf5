package proxy

import "github.com/valyala/fasthttp"

// health answers /health on the client listener, the readiness probe: 200
// while the gateway has an upstream in rotation, 503 when it has none; the
// body gives the verdict and how many upstreams are out, never which (their
// addresses and errors are the admin listener's, Ready).
func (p *Proxy) health(ctx *fasthttp.RequestCtx) { p.answerHealth(ctx, false) }

// Ready answers the admin listener's /ready: the same verdict and status
// code as the client listener's /health, with every upstream out of
// rotation listed: its pool, why, the last probe's error, since when
// (gateway.Snapshot.AppendHealth).
func (p *Proxy) Ready(ctx *fasthttp.RequestCtx) { p.answerHealth(ctx, true) }

func (p *Proxy) answerHealth(ctx *fasthttp.RequestCtx, detail bool) {
	body, ready := p.gw.Snapshot().AppendHealth(nil, detail)
	if !ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
