//go:build linux

package sock

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pumpReads pumps raw, reading whatever arrives into got, until the peer's
// end; it returns how many read system calls the pump made and the end's
// error. waiting, when not nil, runs once, when the pump first waits. A
// read deadline of 10 s bounds a pump that never sees the end.
func pumpReads(t *testing.T, local *net.TCPConn, raw *Conn, got chan<- string, waiting func()) (int, error) {
	t.Helper()
	calls := 0
	read := raw.readFn
	raw.readFn = func(fd uintptr) bool { calls++; return read(fd) }
	_ = local.SetReadDeadline(time.Now().Add(10 * time.Second))
	var end error
	buf := make([]byte, 4096)
	err := raw.Pump(func() bool {
		for {
			n, err := raw.Read(buf)
			if err == ErrWouldBlock {
				if waiting != nil {
					waiting()
					waiting = nil
				}
				return true
			}
			if err != nil {
				end = err
				return false
			}
			got <- string(buf[:n])
		}
	})
	if err != nil {
		return calls, err
	}
	return calls, end
}

// TestPumpOneReadPerArrival sends messages one at a time, each once the one
// before was read: a pump reads each with one system call (a short read
// took all the socket held, so it waits without asking again), and the
// end with one more. Reading until the socket is empty would take two per
// message. The poller may wake a reader for nothing now and then (an
// edge for readiness already taken): a few reads more are allowed.
func TestPumpOneReadPerArrival(t *testing.T) {
	const messages = 20
	local, peer := tcpEnds(t)
	raw := New(local)
	got := make(chan string, 1)
	_, _ = peer.Write([]byte{'a'}) // there when the pump starts: its first read finds it
	go func() {
		for i := 1; i <= messages; i++ {
			<-got // wait until the pump read the one before
			if i < messages {
				_, _ = peer.Write([]byte{'a' + byte(i)})
			}
		}
		peer.Close()
	}()
	calls, end := pumpReads(t, local, raw, got, nil)
	if end != io.EOF {
		t.Fatalf("pump ended with %v, want io.EOF", end)
	}
	if calls < messages+1 || calls > messages+messages/4 {
		t.Errorf("%d reads for %d arrivals and the end, want %d (at most %d)", calls, messages, messages+1, messages+messages/4)
	}
}

// TestPumpSeesEndBehindBytes has the peer's last bytes and its end (FIN, or
// RST) arrive together, before the pump reads: the short read returns the
// bytes only, and the end comes with no readiness of its own. The watcher
// reports the end (WatchEnd), before the pump starts (the pump then
// reads after its short read) or while it waits (the report wakes it).
// Without the report the pump would wait until its read deadline.
func TestPumpSeesEndBehindBytes(t *testing.T) {
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tc := range []struct {
		name          string
		reset         bool
		reportedFirst bool // the watcher reports the end before the pump starts
		want          func(error) bool
	}{
		{"FIN reported first", false, true, func(err error) bool { return err == io.EOF }},
		{"FIN reported while waiting", false, false, func(err error) bool { return err == io.EOF }},
		{"RST reported first", true, true, func(err error) bool { return err != nil && !isTimeout(err) }},
		{"RST reported while waiting", true, false, func(err error) bool { return err != nil && !isTimeout(err) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, peer := tcpEnds(t)
			raw := New(local)
			_, _ = peer.Write([]byte("last bytes"))
			if tc.reset {
				_ = peer.SetLinger(0)
			}
			peer.Close()
			waitPeerEnded(t, local)
			// The registration reports an end already there at once.
			var tok Token
			watch := func() { tok = w.WatchEnd(raw) }
			defer func() { w.Unwatch(tok) }()
			if tc.reportedFirst {
				watch()
				for !raw.peerEnded.Load() {
					time.Sleep(time.Millisecond)
				}
				watch = nil
			} else {
				// Idle, so Go's poller takes the readiness the bytes and
				// the end brought before the pump starts (and forgets it).
				time.Sleep(20 * time.Millisecond)
			}
			got := make(chan string, 10)
			_, end := pumpReads(t, local, raw, got, watch)
			if !tc.want(end) {
				t.Errorf("pump ended with %v", end)
			}
			if !tc.reset && (len(got) != 1 || <-got != "last bytes") {
				t.Error("the bytes before the end were not read first")
			}
		})
	}
}

// waitPeerEnded waits until conn's socket has the peer's FIN or RST: its
// TCP state leaves ESTABLISHED.
func waitPeerEnded(t *testing.T, conn *net.TCPConn) {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for {
		var info *unix.TCPInfo
		_ = rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), syscall.IPPROTO_TCP, unix.TCP_INFO) })
		if err != nil {
			t.Fatal(err)
		}
		if info.State != unix.BPF_TCP_ESTABLISHED {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
