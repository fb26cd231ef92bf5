//go:build !race

package exporters

import (
	"testing"

	"github.com/ttftlens/ttftlens/stages"
)

// TestRingEmitAllocs pins Ring.Emit at zero allocations: the copy goes
// into a preallocated slot.
func TestRingEmitAllocs(t *testing.T) {
	g := NewRing(RingOptions{Recent: 16, Slowest: 4})
	r := typical()
	if n := testing.AllocsPerRun(500, func() { g.Emit(r) }); n > 0 {
		t.Errorf("Ring.Emit: %v allocs, want 0", n)
	}
}

// TestSegmentsAllocs pins a waterfall at zero allocations when its buffer
// is maxSegments long, for the longest kind: a load, an inferred queue,
// reasoning, decode, finish and a prediction; and its JSON, into a buffer
// large enough.
func TestSegmentsAllocs(t *testing.T) {
	r := reasoningFixture.record()
	r.Timeline.SetEngine(stages.EngineLoad, 20*ms)
	predict(r)
	var buf [maxSegments]Segment
	if n := testing.AllocsPerRun(100, func() { Segments(buf[:0], r) }); n > 0 {
		t.Errorf("Segments: %v allocs, want 0", n)
	}
	b := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { b = appendWaterfall(b[:0], r) }); n > 0 {
		t.Errorf("appendWaterfall: %v allocs, want 0", n)
	}
}
