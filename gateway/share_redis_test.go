//go:build integration

package gateway

import (
	"testing"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/redistest"
)

// TestShareRoutingRedis: two replicas sharing their routing through a real
// Redis (share_routing: redis, the quota backend's server): what A routes,
// B records on the same upstream. Redis restarts: the replicas subscribe
// again, and what A routes after is shared again.
func TestShareRoutingRedis(t *testing.T) {
	r := redistest.Start(t)
	mk := func() *Gateway {
		cfg := ttftConfig(2, 0)
		cfg.ShareRouting, cfg.ShareChannel = QuotaRedis, r.KeyPrefix()+"routing"
		cfg.QuotaBackend = redisBackend(r, QuotaFailOpen)
		g, _ := newGateway(t, cfg, Options{Clock: clock.Real}) // the receiver's retry waits a real second
		g.Start()
		return g
	}
	a, b := mk(), mk()
	channel := a.Snapshot().Config().ShareChannel
	r.WaitSubscribed(channel, 2)

	var p fastjson.Parser
	route := func(i int) []uint64 {
		s := a.Snapshot()
		req := chatRequest(t, s, &p, systemPrompt(i, 800), "?")
		defer req.Release()
		c := choose(t, s, &req)
		ub := b.Snapshot().Pools()[0].Upstreams[c.Upstream.id-1] // B numbers the same URLs alike
		received(b, uint64(i))
		if m := b.index.Lookup(req.prompt.chain); m.Blocks != len(req.prompt.chain) || m.Latest() != ub.id {
			t.Fatalf("request %d: B's index %+v; want the whole chain on %s", i, m, ub.Name)
		}
		return req.prompt.chain
	}
	route(1)

	r.Stop()
	r.Start()
	r.WaitSubscribed(channel, 2)
	route(2)
	if st := b.share.Load().Stats(); st.Failed == 0 {
		t.Fatalf("B's stats %+v: the restart counted no failure", st)
	}
}
