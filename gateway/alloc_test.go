//go:build !race

package gateway

import (
	"testing"
	"time"

	"github.com/valyala/fastjson"
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
			var p fastjson.Parser
			step := func() {
				req, rej := s.CheckRequest(&p, Chat, body)
				if rej != nil {
					t.Fatal(rej)
				}
				c, rej := s.Choose(&req, nil)
				if rej != nil {
					t.Fatal(rej)
				}
				s.Commit(&req, &c)
				req.Release()
				release, rej := c.Upstream.Acquire(nil)
				if rej != nil {
					t.Fatal(rej)
				}
				release()
				if cold && c.Upstream == r.Pool.Upstreams[0] {
					return // stays cold
				}
				c.Upstream.Observe(&c, engine{perToken: 100 * time.Microsecond}.observation(clk.Now(), req.PromptTokens, c.Expected.Cached, c.Load.InFlight))
			}
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
