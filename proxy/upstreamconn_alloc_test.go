//go:build !race

package proxy

import (
	"io"
	"testing"
)

// TestCountingConnAllocs: counting a response's pieces (a request's write,
// the response's reads, the count at its end) allocates nothing once the
// connection has been used.
func TestCountingConnAllocs(t *testing.T) {
	c, peer := tcpPair(t)
	req, resp := []byte("request"), make([]byte, 8)
	exchange := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, resp[:len(req)]); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(resp); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatal(err)
		}
		if c.arrivals() != 1 {
			t.Fatalf("arrivals %d, want 1", c.arrivals())
		}
	}
	exchange()
	if n := testing.AllocsPerRun(100, exchange); n != 0 {
		t.Errorf("%v allocations per exchange, want 0", n)
	}
}
