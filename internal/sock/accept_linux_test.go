//go:build linux

package sock

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rawAccepted returns a connection RawListener accepted and its client's
// end, closed when the test ends.
func rawAccepted(t *testing.T, addr string) (accepted net.Conn, client net.Conn) {
	t.Helper()
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ln := RawListener(inner)
	t.Cleanup(func() { ln.Close() })
	if client, err = net.Dial("tcp", inner.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if accepted, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); accepted.Close() })
	return accepted, client
}

// intOption reads one integer socket option of conn's socket.
func intOption(t *testing.T, conn net.Conn, level, opt int) int {
	t.Helper()
	rc := rawConn(conn)
	if rc == nil {
		t.Fatalf("%T: no socket", conn)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// TestRawListenerAccepts: a connection accepted raw is this package's
// own, read and written through its Conn, with both addresses (also
// behind a wildcard listener), TCP_NODELAY and Go's keep-alive inherited
// from the listening socket.
func TestRawListenerAccepts(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", ":0"} {
		t.Run(addr, func(t *testing.T) {
			if strings.HasPrefix(addr, "[::1]") {
				if ln, err := net.Listen("tcp", addr); err != nil {
					t.Skip("no IPv6 loopback:", err)
				} else {
					ln.Close()
				}
			}
			conn, client := rawAccepted(t, addr)
			if _, ok := conn.(*tcpConn); !ok || Of(conn) == nil || New(conn) != Of(conn) {
				t.Fatalf("accepted %T, Of %v: want this package's own connection", conn, Of(conn))
			}
			if got, want := conn.RemoteAddr().String(), client.LocalAddr().String(); got != want {
				t.Errorf("RemoteAddr %s, want %s", got, want)
			}
			if got, want := conn.LocalAddr().String(), client.RemoteAddr().String(); got != want {
				t.Errorf("LocalAddr %s, want %s", got, want)
			}
			for _, o := range acceptedOptions {
				if got := intOption(t, conn, o.level, o.opt); got != o.value {
					t.Errorf("option %d/%d = %d, want %d", o.level, o.opt, got, o.value)
				}
			}
			if _, err := client.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(conn, b); err != nil || string(b) != "ping" {
				t.Fatalf("read %q, %v", b, err)
			}
			if _, err := conn.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(client, b); err != nil || string(b) != "pong" {
				t.Fatalf("client read %q, %v", b, err)
			}
		})
	}
}

// TestRawListenerQueuedBefore: a connection whose handshake completed
// before RawListener took the listener (a client that connected while
// the process was starting) has TCP_NODELAY and Go's keep-alive too,
// whether the listener is Listen's (they were set before it listened) or
// any other (they are set on each socket accepted). Without them, Nagle's
// algorithm held a stream's small writes for the client's delayed
// acknowledgement, 40 ms each time.
func TestRawListenerQueuedBefore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		listen  func(string) (net.Listener, error)
		setEach bool // not inherited: set on each socket accepted
	}{
		{"Listen", Listen, false},
		{"net.Listen", func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := tc.listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			client, err := net.Dial("tcp", inner.Addr().String()) // queued: the kernel completed its handshake
			if err != nil {
				inner.Close()
				t.Fatal(err)
			}
			defer client.Close()
			ln := RawListener(inner)
			defer ln.Close()
			if a, ok := ln.(*acceptListener); !ok || a.setEach != tc.setEach {
				t.Fatalf("RawListener made %T %+v, want an acceptListener with setEach %v", ln, ln, tc.setEach)
			}
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if Of(conn) == nil {
				t.Fatalf("accepted %T: want this package's own connection", conn)
			}
			for _, o := range acceptedOptions {
				if got := intOption(t, conn, o.level, o.opt); got != o.value {
					t.Errorf("option %d/%d = %d, want %d", o.level, o.opt, got, o.value)
				}
			}
		})
	}
}

// TestRawConnErrors: an accepted connection's deadlines, half-close and
// close, with net.Conn's errors.
func TestRawConnErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(conn, client net.Conn) error
		want func(error) bool
	}{
		{"read deadline", func(conn, _ net.Conn) error {
			_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
			_, err := conn.Read(make([]byte, 1))
			return err
		}, isTimeout},
		{"write deadline past", func(conn, _ net.Conn) error {
			_ = conn.SetWriteDeadline(time.Unix(1, 0))
			_, err := conn.Write([]byte("x"))
			return err
		}, isTimeout},
		{"read after close", func(conn, _ net.Conn) error {
			conn.Close()
			_, err := conn.Read(make([]byte, 1))
			return err
		}, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"closed while reading", func(conn, _ net.Conn) error {
			go conn.Close() // the read waits in the poller, or finds it closed: either way
			_, err := conn.Read(make([]byte, 1))
			return err
		}, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"close twice", func(conn, _ net.Conn) error {
			conn.Close()
			return conn.Close()
		}, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"deadline after close", func(conn, _ net.Conn) error {
			conn.Close()
			return conn.SetDeadline(time.Time{})
		}, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"half-close: the peer reads its end", func(conn, client net.Conn) error {
			if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				return err
			}
			_, err := client.Read(make([]byte, 1))
			return err
		}, func(err error) bool { return err == io.EOF }},
		{"peer ends", func(conn, client net.Conn) error {
			client.Close()
			_, err := conn.Read(make([]byte, 1))
			return err
		}, func(err error) bool { return err == io.EOF }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, client := rawAccepted(t, "127.0.0.1:0")
			if err := tc.do(conn, client); !tc.want(err) {
				t.Errorf("error %v (%T)", err, err)
			}
		})
	}
}

// TestRawListenerErrors: Accept's errors are net's, by their kinds: the
// listener closed while an Accept waits (fasthttp's Serve ends on it by
// its text), its deadline, and no descriptor free (EMFILE, which the
// proxy's accept backoff waits out).
func TestRawListenerErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(ln net.Listener) error
		want func(error) bool
	}{
		{"closed while accepting", func(ln net.Listener) error {
			go ln.Close() // Accept waits in the poller, or finds it closed: either way
			_, err := ln.Accept()
			return err
		}, func(err error) bool {
			return errors.Is(err, net.ErrClosed) && strings.Contains(err.Error(), "use of closed network connection")
		}},
		{"accept after close", func(ln net.Listener) error {
			ln.Close()
			_, err := ln.Accept()
			return err
		}, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"deadline", func(ln net.Listener) error {
			_ = ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(time.Millisecond))
			_, err := ln.Accept()
			return err
		}, isTimeout},
		{"no descriptor free", func(ln net.Listener) error {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return err
			}
			defer c.Close()
			// The lowest free descriptor is the limit: accept4 has none.
			free, err := syscall.Dup(0)
			if err != nil {
				return err
			}
			syscall.Close(free)
			var lim syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				return err
			}
			low := lim
			low.Cur = uint64(free)
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
				return err
			}
			_, err = ln.Accept()
			if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); rerr != nil {
				t.Fatal(rerr)
			}
			return err
		}, func(err error) bool { return errors.Is(err, syscall.EMFILE) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := RawListener(inner)
			defer ln.Close()
			if _, ok := ln.(*acceptListener); !ok {
				t.Fatalf("RawListener gave %T", ln)
			}
			if err := tc.do(ln); !tc.want(err) {
				t.Errorf("error %v (%T)", err, err)
			}
		})
	}
}
