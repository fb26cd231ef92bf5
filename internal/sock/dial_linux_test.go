//go:build linux

package sock

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fullListener returns the address of a listening socket whose accept
// queue (backlog 0: one connection) is full and never taken: a SYN to it
// is dropped, so a connect to it waits.
func fullListener(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	queued, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { queued.Close() })
	return addr
}

// TestDial: a dialed connection is this package's own, with its
// addresses and options, and carries bytes both ways; a refused connect
// and one past its timeout fail as net.Dial's do.
func TestDial(t *testing.T) {
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, current) }) // the echo servers' goroutines, after the subtests' cleanups
	listen := func(t *testing.T, addr string) netip.AddrPort {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skip("cannot listen:", err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(c, c); c.Close() }()
			}
		}()
		return ln.Addr().(*net.TCPAddr).AddrPort()
	}
	refused := func(t *testing.T) netip.AddrPort {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := ln.Addr().(*net.TCPAddr).AddrPort()
		ln.Close()
		return a
	}
	for _, tc := range []struct {
		name    string
		addr    func(t *testing.T) netip.AddrPort
		timeout time.Duration
		want    func(error) bool // nil: the dial succeeds
	}{
		{"IPv4", func(t *testing.T) netip.AddrPort { return listen(t, "127.0.0.1:0") }, time.Minute, nil},
		{"IPv6", func(t *testing.T) netip.AddrPort { return listen(t, "[::1]:0") }, time.Minute, nil},
		{"no timeout", func(t *testing.T) netip.AddrPort { return listen(t, "127.0.0.1:0") }, 0, nil},
		{"refused", refused, time.Minute, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }},
		{"timeout", fullListener, 20 * time.Millisecond, isTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			conn, err := Dial(addr, tc.timeout)
			if tc.want != nil {
				var oe *net.OpError
				if conn != nil || !tc.want(err) || !errors.As(err, &oe) || oe.Op != "dial" {
					t.Fatalf("Dial: %v, %v (%T)", conn, err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if Of(conn) == nil || New(conn) != Of(conn) {
				t.Fatalf("dialed %T: want this package's own connection", conn)
			}
			if got := conn.RemoteAddr().(*net.TCPAddr).AddrPort(); got != addr {
				t.Errorf("RemoteAddr %v, want %v", got, addr)
			}
			if la := conn.LocalAddr().(*net.TCPAddr); la.Port == 0 || !la.IP.Equal(addr.Addr().AsSlice()) {
				t.Errorf("LocalAddr %v", la)
			}
			for _, o := range dialOptions {
				if got := intOption(t, conn, o.level, o.opt); got != o.value {
					t.Errorf("option %d/%d = %d, want %d", o.level, o.opt, got, o.value)
				}
			}
			// The connect's deadline is gone: a write and a read wait as
			// long as they must.
			if _, err := conn.Write([]byte("echo")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(conn, b); err != nil || string(b) != "echo" {
				t.Fatalf("read %q, %v", b, err)
			}
		})
	}
}
