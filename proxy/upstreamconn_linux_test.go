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
