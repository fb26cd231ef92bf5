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
