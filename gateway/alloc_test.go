//go:build !race

package gateway

import (
	"testing"

	"github.com/valyala/fastjson"
)

// TestGatewayStepAllocs: the whole gateway step allocates nothing in steady
// state.
func TestGatewayStepAllocs(t *testing.T) {
	gb := newGatewayBench(t)
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
