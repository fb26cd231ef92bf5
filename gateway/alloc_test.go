//go:build !race

package gateway

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/share"
)

// TestGatewayStepAllocs: the whole gateway step allocates nothing in steady
// state, in the benchmark's worlds: ten least_request pools, and one
// least_ttft pool of 100 upstreams.
func TestGatewayStepAllocs(t *testing.T) {
	for name, world := range map[string]func(testing.TB) *gatewayBench{"least_request": newGatewayBench, "least_ttft": newTTFTBench} {
		t.Run(name, func(t *testing.T) {
			gb := world(t)
			var p fastjson.Parser
			i := 0
			step := func() {
				if err := gb.step(&p, i); err != nil {
					t.Fatal(err)
				}
				i++
			}
			for range 200 {
				step()
			}
			if n := testing.AllocsPerRun(1000, step); n != 0 {
				t.Fatalf("gateway step: %v allocs, want 0", n)
			}
		})
	}
}

// TestChooseAllocs: in a pool of each policy, a request checked, its
// upstream chosen and taken, and its end observed, allocates nothing; in
// a least_ttft pool with a model cold too (prefix affinity chooses).
func TestChooseAllocs(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + systemPrompt(1, 1000) + `"},{"role":"user","content":"Why?"}]}`)
	for _, policy := range append(policies, "least_ttft cold") {
		t.Run(policy, func(t *testing.T) {
			cold := policy == "least_ttft cold"
			if cold {
				policy = PolicyLeastTTFT
			}
			_, s, r, clk := threeUpstreams(t, PoolConfig{Policy: policy})
			for i, u := range r.Pool.Upstreams {
				u.SetEngineLoad(EngineLoad{Waiting: int64(i), Running: 2, KVCacheUsage: 0.5}, u.ScrapeMark())
				if !cold || i > 0 {
					engine{perToken: 100 * time.Microsecond, perAhead: 10 * time.Millisecond}.teach(u, clk.Now())
				}
			}
			var unobserved *Upstream
			if cold {
				unobserved = r.Pool.Upstreams[0] // stays cold
			}
			var p fastjson.Parser
			step := func() { serveOne(t, s, &p, body, clk.Now(), unobserved) }
			step()
			if n := testing.AllocsPerRun(1000, step); n != 0 {
				t.Fatalf("%s: %v allocs, want 0", policy, n)
			}
		})
	}
}

// TestPickLeastLoadAllocs: a least_load pick, loads known and a request
// on the chosen upstream, allocates nothing.
func TestPickLeastLoadAllocs(t *testing.T) {
	_, s, r := leastLoadPool(t, Options{}, "http://a:1", "http://b:1", "http://c:1")
	for i, u := range r.Pool.Upstreams {
		u.SetEngineLoad(EngineLoad{Waiting: int64(i), Running: 2, KVCacheUsage: 0.5}, u.ScrapeMark())
	}
	pick := func() {
		_, release := pickAndAcquire(t, s, r)
		release()
	}
	pick()
	if n := testing.AllocsPerRun(1000, pick); n != 0 {
		t.Fatalf("least_load pick: %v allocs, want 0", n)
	}
}

// TestShareCommitAllocs: with share_routing, a least_ttft request's
// Commit, its end and its observation publish it and still allocate
// nothing once the sharer's
// buffers are warm (the transport here takes each message and keeps
// nothing: its own costs are the publisher goroutine's, not the request's).
func TestShareCommitAllocs(t *testing.T) {
	cfg := ttftConfig(3, 0)
	cfg.ShareRouting = QuotaRedis
	cfg.QuotaBackend = QuotaBackend{Kind: QuotaRedis, Redis: RedisConfig{Address: "127.0.0.1:1"}}
	g, clk := newGateway(t, cfg, Options{ShareTransport: func() share.Transport { return sink{} }})
	g.Start()
	s := g.Snapshot()
	for _, u := range s.Pools()[0].Upstreams {
		engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
	}
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + systemPrompt(1, 1000) + `"},{"role":"user","content":"Why?"}]}`)
	var p fastjson.Parser
	step := func() {
		serveOne(t, s, &p, body, clk.Now(), nil) // its commit, end and observation published
		// AllocsPerRun runs on one P: let the publisher take the message
		// and hand its buffer back, as it does beside requests on their
		// own cores.
		runtime.Gosched()
	}
	for range 100 {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocs, want 0", n)
	}
	if g.share.Load().Stats().Dropped != 0 {
		t.Fatal("messages dropped: the publisher did not keep up")
	}
}

// sink is a share.Transport that takes every message and receives none.
type sink struct{}

func (sink) Publish(context.Context, [][]byte) error { return nil }
func (sink) Receive(ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (sink) Close() error { return nil }

// serveOne checks the chat body, chooses its upstream and commits the
// choice, as the proxy's admit does, takes and releases the upstream's
// slot, and has the upstream observe the request's end at now, unless it
// is unobserved (nil: none).
func serveOne(t testing.TB, s *Snapshot, p *fastjson.Parser, body []byte, now time.Duration, unobserved *Upstream) {
	req, rej := s.CheckRequest(p, Chat, body)
	if rej != nil {
		t.Fatal(rej)
	}
	defer req.Release()
	c, rej := s.Choose(&req, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	s.Commit(&req, &c)
	release, rej := c.Upstream.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	release()
	if c.Upstream != unobserved {
		c.Upstream.Observe(&c, engine{perToken: 100 * time.Microsecond}.observation(now, req.PromptTokens, c.Expected.Cached, c.Load.InFlight))
	}
}
