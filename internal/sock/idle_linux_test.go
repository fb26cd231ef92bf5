//go:build linux

package sock

import (
	"net"
	"testing"
)

// TestUnread holds Unread to what an idle socket holds: nothing, bytes
// (left unread), the peer's end.
func TestUnread(t *testing.T) {
	local, peer := tcpEnds(t)
	raw := New(local)
	if b, e := raw.Unread(); b || e {
		t.Fatalf("empty socket: bytes %v, ended %v", b, e)
	}
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitUnread(t, raw, true, false)
	waitUnread(t, raw, true, false) // a peek: still there
	buf := make([]byte, 1)
	if n, err := raw.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	peer.Close()
	waitUnread(t, raw, false, true)
	local.Close()
	if b, e := raw.Unread(); b || !e {
		t.Fatalf("closed socket: bytes %v, ended %v; want its end", b, e)
	}
}

// waitUnread waits until Unread answers bytes, ended: what a peer sent
// reaches the socket a moment after its write returns.
func waitUnread(t *testing.T, raw *Conn, bytes, ended bool) {
	t.Helper()
	for {
		b, e := raw.Unread()
		if b == bytes && e == ended {
			return
		}
		if b || e {
			t.Fatalf("Unread: bytes %v, ended %v; want %v, %v", b, e, bytes, ended)
		}
		if !WaitReadable(raw.conn, 5e9) {
			t.Fatalf("nothing arrived; want bytes %v, ended %v", bytes, ended)
		}
	}
}

// TestWatchIdle holds an upstream connection's registration to its
// phases: idle, any byte or end is reported once (bytes told from the
// end) and EndIdle refuses the connection; back to a request, bytes are
// not reported, only the end, to the registration's own callback.
func TestWatchIdle(t *testing.T) {
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tc := range []struct {
		name      string
		send      func(peer *net.TCPConn)
		wantBytes bool
	}{
		{"bytes", func(p *net.TCPConn) { p.Write([]byte("HTTP/1.1 200 OK\r\n")) }, true},
		{"end", func(p *net.TCPConn) { p.Close() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, peer := tcpEnds(t)
			ended := make(chan struct{}, 1)
			tok := w.Watch(local, func() { ended <- struct{}{} })
			defer w.Unwatch(tok)
			idle := make(chan bool, 2)
			if !w.WatchIdle(tok, func(bytes bool) { idle <- bytes }) {
				t.Fatal("WatchIdle refused a live connection")
			}
			tc.send(peer)
			if got := <-idle; got != tc.wantBytes {
				t.Errorf("idle reported bytes %v, want %v", got, tc.wantBytes)
			}
			if w.EndIdle(tok) {
				t.Error("EndIdle accepted a connection its idle report refused")
			}
			if w.WatchIdle(tok, func(bool) { idle <- true }) {
				t.Error("WatchIdle accepted a reported registration")
			}
			select {
			case <-ended:
				t.Error("the end callback ran for an idle report")
			default:
			}
		})
	}

	t.Run("active", func(t *testing.T) {
		local, peer := tcpEnds(t)
		ended := make(chan struct{}, 1)
		tok := w.Watch(local, func() { ended <- struct{}{} })
		defer w.Unwatch(tok)
		idle := make(chan bool, 1)
		for range 3 { // a connection serves request after request
			if !w.WatchIdle(tok, func(b bool) { idle <- b }) || !w.EndIdle(tok) {
				t.Fatal("a quiet connection's phases refused")
			}
		}
		if _, err := peer.Write([]byte("a response")); err != nil {
			t.Fatal(err)
		}
		waitUnread(t, New(local), true, false)
		peer.Close()
		<-ended // the end, to its own callback; and the bytes before it never to idle
		select {
		case b := <-idle:
			t.Errorf("idle reported (bytes %v) on a connection serving a request", b)
		default:
		}
		if w.WatchIdle(tok, func(bool) {}) {
			t.Error("WatchIdle accepted a connection whose end was reported")
		}
	})

	t.Run("zero token", func(t *testing.T) {
		if !w.WatchIdle(Token{}, func(bool) {}) || !w.EndIdle(Token{}) {
			t.Error("a connection nothing watches is refused")
		}
	})
}
