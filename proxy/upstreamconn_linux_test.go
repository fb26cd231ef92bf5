//go:build linux && (amd64 || arm64)

package proxy

import (
	"io"
	"strings"
	"testing"
)

// TestCountingConnSegments checks that a response's pieces are the
// upstream's writes as the kernel received them, however late the proxy
// reads them, counted afresh from each request's write.
func TestCountingConnSegments(t *testing.T) {
	c, peer := tcpPair(t)
	for _, tt := range []struct {
		name   string
		writes []string
	}{
		{"each write a piece, read at once", strings.Split("a b c d e f g h i j", " ")},
		{"one write", []string{strings.Repeat("x", 3000)}},
		{"the next request starts over", []string{"one", "two", "three"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(peer, make([]byte, len("request"))); err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, w := range tt.writes {
				if _, err := peer.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
				total += len(w)
			}
			// The proxy reads only now, everything at once.
			if _, err := io.ReadFull(c, make([]byte, total)); err != nil {
				t.Fatal(err)
			}
			if got := c.arrivals(); got != len(tt.writes) {
				t.Errorf("arrivals %d, want %d (reads %d)", got, len(tt.writes), c.reads-c.readsAtWrite)
			}
		})
	}
}

// TestCountingConnSegmentsCarriedOver: the count a response ended at is
// the next request's start, without asking the kernel again, unless a byte
// was read after it.
func TestCountingConnSegmentsCarriedOver(t *testing.T) {
	c, peer := tcpPair(t)
	exchange := func(writes ...string) int {
		t.Helper()
		if _, err := c.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, make([]byte, len("request"))); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, w := range writes {
			if _, err := peer.Write([]byte(w)); err != nil {
				t.Fatal(err)
			}
			total += len(w)
		}
		if _, err := io.ReadFull(c, make([]byte, total)); err != nil {
			t.Fatal(err)
		}
		return c.arrivals()
	}
	if got := exchange("a", "b"); got != 2 || !c.segsNowKnown {
		t.Fatalf("arrivals %d (count kept %v), want 2 and kept", got, c.segsNowKnown)
	}
	if got := exchange("c", "d", "e"); got != 3 {
		t.Errorf("from the kept count: arrivals %d, want 3", got)
	}
	// A stray byte read after the count: the next request asks the kernel.
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil || c.segsNowKnown {
		t.Fatalf("stray byte: %v, count still kept %v", err, c.segsNowKnown)
	}
	if got := exchange("f"); got != 1 {
		t.Errorf("after a stray byte: arrivals %d, want 1", got)
	}
}
