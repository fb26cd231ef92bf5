//go:build linux

package sock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpEnds returns the two ends of a loopback TCP connection, closed when
// the test ends.
func tcpEnds(t testing.TB) (local, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); p.Close() })
	return c.(*net.TCPConn), p.(*net.TCPConn)
}

// isTimeout reports a deadline passing, as net.Conn's errors say it.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// TestConnErrors holds Conn to what the relay reads from net.Conn's
// errors: io.EOF at a clean end, a reset, a deadline (the heartbeat, the
// write stall) and a close (an abort) by their kinds.
func TestConnErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(local, peer *net.TCPConn)
		write bool // write to the peer (which never reads) instead of reading
		want  func(error) bool
	}{
		{"peer ends", func(_, peer *net.TCPConn) { peer.Close() }, false,
			func(err error) bool { return err == io.EOF }},
		{"peer resets", func(_, peer *net.TCPConn) { _ = peer.SetLinger(0); peer.Close() }, false,
			func(err error) bool { return errors.Is(err, syscall.ECONNRESET) }},
		{"read deadline", func(local, _ *net.TCPConn) { _ = local.SetReadDeadline(time.Now().Add(time.Millisecond)) }, false,
			isTimeout},
		{"closed while reading", func(local, _ *net.TCPConn) { local.Close() }, false,
			func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"write deadline, peer not reading", func(local, _ *net.TCPConn) { _ = local.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)) }, true,
			isTimeout},
		{"write after peer reset", func(_, peer *net.TCPConn) { _ = peer.SetLinger(0); peer.Close() }, true,
			func(err error) bool { return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, peer := tcpEnds(t)
			raw := New(local)
			if raw == nil {
				t.Fatal("no raw I/O for a TCP connection")
			}
			tc.setup(local, peer)
			var err error
			if tc.write {
				big := make([]byte, 1<<20)
				for err == nil { // until the socket buffers are full, or the reset is seen
					_, err = raw.Write(big)
				}
			} else {
				_, err = raw.Read(make([]byte, 64))
			}
			if !tc.want(err) {
				t.Errorf("error %v (%T), not the kind net.Conn returns here", err, err)
			}
			if err != nil && strings.Contains(err.Error(), "raw-") {
				t.Errorf("error %q wraps RawConn's own error: net.Conn's would read once", err)
			}
		})
	}
}

// TestConnData checks that bytes go through whole, both ways.
func TestConnData(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := New(local)
	want := bytes.Repeat([]byte("data: {\"x\":1}\n\n"), 1<<14) // more than one socket buffer
	go func() {
		_, _ = peer.Write(want)
		_ = peer.CloseWrite()
	}()
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := raw.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(want))
	}
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(peer)
		done <- b
	}()
	if n, err := raw.Write(want); n != len(want) || err != nil {
		t.Fatalf("write = %d, %v; want %d, nil", n, err, len(want))
	}
	// Gathered: each buffer larger than the socket takes in one call, so
	// writes end inside a buffer and go on from there; an empty one is skipped.
	parts := [][]byte{bytes.Repeat([]byte("a"), 300_000), nil, bytes.Repeat([]byte("b"), 200_001), []byte("c")}
	all := bytes.Join(parts, nil)
	if n, err := raw.WriteVec(parts); n != len(all) || err != nil {
		t.Fatalf("WriteVec = %d, %v; want %d, nil", n, err, len(all))
	}
	_ = local.CloseWrite()
	if b, want := <-done, append(want, all...); !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d (the write's, then the gathered write's)", len(b), len(want))
	}
}

// TestConnReadStamped: a stamped read says how long its bytes waited in
// the socket: at least the time the reader slept after they were written,
// at most the time since the write began.
func TestConnReadStamped(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := New(local)
	if !raw.StampReceives() {
		t.Fatal("SO_TIMESTAMPNS refused")
	}
	buf := make([]byte, 64)
	// The kernel turns receive timestamps on a moment after the first
	// socket asks: wait for a probe's bytes to come with one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := peer.Write([]byte("probe")); err != nil {
			t.Fatal(err)
		}
		_, waited, err := raw.ReadStamped(buf)
		if err != nil {
			t.Fatal(err)
		}
		if waited >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no receive timestamp within 5 s")
		}
	}
	const slept = 20 * time.Millisecond
	before := time.Now()
	if _, err := peer.Write([]byte("data: {}\n\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(slept)
	n, waited, err := raw.ReadStamped(buf)
	since := time.Since(before)
	if err != nil || string(buf[:n]) != "data: {}\n\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if waited < slept || waited > since {
		t.Errorf("waited %v, want between the sleep %v and the time since the write %v", waited, slept, since)
	}
	peer.Close()
	if n, _, err := raw.ReadStamped(buf); n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}
