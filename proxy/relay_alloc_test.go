//go:build !race

package proxy

import (
	"bytes"
	"testing"
)

// TestRelayZeroAllocs proves the per-event path allocates nothing once warm,
// for answer events and for a reasoning model's reasoning before them.
func TestRelayZeroAllocs(t *testing.T) {
	const n = 200
	reasoning := bytes.Repeat([]byte(`data: {"choices":[{"index":0,"delta":{"reasoning_content":" hmm"}}]}`+"\n\n"), n)
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"answer", relayStream(n)},
		{"reasoning then answer", append(reasoning, relayStream(n)...)},
	} {
		for _, chunked := range []bool{true, false} {
			h := newRelayHarness(t, tc.stream)
			h.x.out.chunked = chunked
			h.run(t, tc.stream) // warm buffers and parser caches
			allocs := testing.AllocsPerRun(20, func() { h.run(t, tc.stream) })
			if perEvent := allocs / n; perEvent > 0 {
				t.Errorf("%s (chunked %v): %.1f allocations per stream of %d events (%.3f per event), want 0", tc.name, chunked, allocs, n, perEvent)
			}
		}
	}
}
