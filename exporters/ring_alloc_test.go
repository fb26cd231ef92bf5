//go:build !race

package exporters

import "testing"

// TestRingEmitAllocs pins Ring.Emit at zero allocations: the copy goes
// into a preallocated slot.
func TestRingEmitAllocs(t *testing.T) {
	g := NewRing(RingOptions{Recent: 16, Slowest: 4})
	r := typical()
	if n := testing.AllocsPerRun(500, func() { g.Emit(r) }); n > 0 {
		t.Errorf("Ring.Emit: %v allocs, want 0", n)
	}
}
