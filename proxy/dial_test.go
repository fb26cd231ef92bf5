package proxy

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/ttftlens/ttftlens/internal/sock"
)

// TestUpstreamDialer: an upstream's host:port dialed, an IP address as it
// is and a name looked up; what cannot be dialed fails with net's errors.
func TestUpstreamDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := gone.Addr().String()
	gone.Close()
	for _, tc := range []struct {
		name, addr string
		newErr     bool             // newUpstreamDialer refuses addr
		dialErr    func(error) bool // nil: the dial succeeds
	}{
		{"IP address", "127.0.0.1:" + port, false, nil},
		{"name", "localhost:" + port, false, nil},
		{"refused", refused, false, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{"no port", "127.0.0.1", true, nil},
		{"port out of range", "127.0.0.1:70000", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := newUpstreamDialer(tc.addr)
			if tc.newErr {
				if err == nil {
					t.Fatalf("newUpstreamDialer(%q) took it", tc.addr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.dial()
			if tc.dialErr != nil {
				if !tc.dialErr(err) {
					t.Fatalf("dial: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if sock.Of(c) == nil {
				t.Errorf("dialed %T: not read and written raw", c)
			}
			if p := <-accepted; p.RemoteAddr().String() != c.LocalAddr().String() {
				t.Errorf("accepted %v, dialed from %v", p.RemoteAddr(), c.LocalAddr())
			} else {
				p.Close()
			}
		})
	}
	ln.Close()
	for c := range accepted {
		c.Close()
	}
}
