//go:build linux && !race

package sock

import (
	"runtime"
	"testing"
)

// TestConnAllocs proves an event's raw read and gathered write allocate
// nothing.
func TestConnAllocs(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := New(local)
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\" hi\"}}]}\n\n")
	framed := [3][]byte{[]byte("35\r\n"), event, []byte("\r\n")} // as a chunk
	buf := make([]byte, 4096)
	roundTrip := func() {
		if _, err := peer.Write(event); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Read(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.WriteVec(framed[:]); err != nil {
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
	raw.StampReceives()
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := peer.Write(event); err != nil {
			t.Fatal(err)
		}
		if _, _, err := raw.ReadStamped(buf); err != nil {
			t.Fatal(err)
		}
	}); allocs > 0 {
		t.Errorf("%.1f allocations per stamped read, want 0", allocs)
	}
}

// TestPumpAllocs: a pump's events (a wait for the socket, the reads)
// allocate nothing: a pump of 101 events allocates what one of 1 event
// does (the pump itself, once per stream).
func TestPumpAllocs(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := New(local)
	event := []byte("data: {}\n\n")
	buf := make([]byte, 64)
	left := 0
	step := func() bool {
		for {
			_, err := raw.Read(buf)
			if err == ErrWouldBlock {
				if left == 0 {
					return false
				}
				left--
				if _, err := peer.Write(event); err != nil {
					t.Fatal(err)
				}
				return true // wait for the event just written
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	pump := func(events int) uint64 {
		left = events - 1
		if _, err := peer.Write(event); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := raw.Pump(step); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	pump(1)
	one, many := pump(1), pump(101)
	if many > one+10 {
		t.Errorf("a pump of 101 events made %d allocations, one of 1 event %d: want no more per event", many, one)
	}
}

// TestSegmentCounterAllocs: reading a socket's segment count allocates
// nothing once the counter has been used on it.
func TestSegmentCounterAllocs(t *testing.T) {
	local, _ := tcpEnds(t)
	var k SegmentCounter
	k.SegmentsIn(local)
	if n := testing.AllocsPerRun(100, func() { k.SegmentsIn(local) }); n != 0 {
		t.Errorf("%v allocations per count, want 0", n)
	}
}

// TestConnWatchAllocs: pointing a connection's registration at a request
// and away again, as every request does, allocates nothing.
func TestConnWatchAllocs(t *testing.T) {
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	local, _ := tcpEnds(t)
	cw := w.WatchConn(local)
	defer w.EndConn(cw)
	gone := func() {}
	if n := testing.AllocsPerRun(100, func() { cw.Arm(&gone); cw.Disarm() }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}

// TestIdleWatchAllocs: a pooled upstream connection's phases (idle, back
// to a request) and the check that it is empty allocate nothing.
func TestIdleWatchAllocs(t *testing.T) {
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	local, _ := tcpEnds(t)
	raw := New(local)
	tok := w.WatchEnd(raw)
	defer w.Unwatch(tok)
	idle := func(bool) {}
	if n := testing.AllocsPerRun(100, func() { w.WatchIdle(tok, idle); w.EndIdle(tok); raw.Unread() }); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
