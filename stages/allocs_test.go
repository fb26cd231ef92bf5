//go:build !race

package stages

import (
	"testing"
	"time"
)

// TestAllocs pins the hot path: one request's clock allocates nothing.
func TestAllocs(t *testing.T) {
	c := &fakeClock{}
	clock := c.read
	var tl Timeline
	var s Stream
	// Warm the gap buffer, then reuse it as a pooled Stream would.
	for i := range 1000 {
		s.Content(time.Duration(i), 0)
	}
	s.Reset()
	at := time.Duration(0)
	var sink Breakdown
	tests := []struct {
		name string
		f    func()
	}{
		{"Start", func() { tl.Start(clock, time.Time{}) }},
		{"Mark", func() {
			c.now++
			for m := GatewayDone; m < NumMarks; m++ {
				tl.Mark(m)
			}
		}},
		{"MarkAt", func() { tl.MarkAt(LastToken, 5) }},
		{"SetEngine", func() {
			for d := EngineQueue; d < NumEngineDurs; d++ {
				tl.SetEngine(d, time.Millisecond)
			}
		}},
		{"Breakdown", func() { sink = tl.Breakdown() }},
		{"Stream.Content", func() {
			at += time.Millisecond
			s.Content(at, time.Millisecond/2)
		}},
	}
	for _, tc := range tests {
		if n := testing.AllocsPerRun(500, tc.f); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tc.name, n)
		}
	}
	if !sink.OK {
		t.Error("Breakdown under test was not OK")
	}
}
