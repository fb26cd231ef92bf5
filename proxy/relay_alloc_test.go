//go:build !race

package proxy

import "testing"

// TestRelayZeroAllocs proves the per-event path allocates nothing once warm.
func TestRelayZeroAllocs(t *testing.T) {
	const n = 200
	stream := relayStream(n)
	h := newRelayHarness(t, stream)
	h.run(t, stream) // warm buffers and parser caches
	allocs := testing.AllocsPerRun(20, func() { h.run(t, stream) })
	if perEvent := allocs / n; perEvent > 0 {
		t.Fatalf("%.1f allocations per stream of %d events (%.3f per event), want 0", allocs, n, perEvent)
	}
}
