package proxy

import (
	"io"
	"net"
	"strings"
	"testing"
)

// TestCountingConnReads checks the count where the kernel keeps none (here
// a pipe): reads that returned bytes, a read that filled its buffer and the
// one after it being one arrival, counted afresh from each request's write.
func TestCountingConnReads(t *testing.T) {
	client, peer := net.Pipe()
	defer client.Close()
	defer peer.Close()
	c := &countingConn{Conn: client}
	for _, tt := range []struct {
		name   string
		writes []string
		buf    int
		want   int
	}{
		{"a read per write", []string{"one", "two", "three"}, 64, 3},
		{"a write longer than the buffer", []string{"0123456789"}, 4, 1},
		{"the next request starts over", []string{"four"}, 64, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			go func() {
				_, _ = io.ReadFull(peer, make([]byte, len("request")))
				for _, w := range tt.writes {
					_, _ = peer.Write([]byte(w))
				}
			}()
			if _, err := c.Write([]byte("request")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, tt.buf)
			for n := len(strings.Join(tt.writes, "")); n > 0; {
				got, err := c.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				n -= got
			}
			if got := c.arrivals(); got != tt.want {
				t.Errorf("arrivals %d, want %d", got, tt.want)
			}
		})
	}
}

// tcpPair returns a counting connection to a loopback peer, both closed
// when the test ends.
func tcpPair(t testing.TB) (*countingConn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); peer.Close() })
	return &countingConn{Conn: conn}, peer
}
