//go:build linux && !race

package proxy

import "testing"

// TestRawIOAllocs proves an event's raw read and gathered write allocate
// nothing.
func TestRawIOAllocs(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := newRawIO(local)
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\" hi\"}}]}\n\n")
	framed := [3][]byte{[]byte("35\r\n"), event, []byte("\r\n")} // as a chunk
	buf := make([]byte, 4096)
	roundTrip := func() {
		if _, err := peer.Write(event); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.read(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.writeVec(framed[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip()
	if allocs := testing.AllocsPerRun(100, roundTrip); allocs > 0 {
		t.Errorf("%.1f allocations per event read and written, want 0", allocs)
	}
	raw.stampReceives()
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := peer.Write(event); err != nil {
			t.Fatal(err)
		}
		if _, _, err := raw.readStamped(buf); err != nil {
			t.Fatal(err)
		}
	}); allocs > 0 {
		t.Errorf("%.1f allocations per stamped read, want 0", allocs)
	}
}
