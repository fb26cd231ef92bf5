package proxy

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/refengine"
)

// TestSlowClientIsTransport has a client read a fast stream slowly: the
// wait shows up as the proxy blocked on the client (transport), and the
// inter-token gaps stay those of the upstream (decode).
func TestSlowClientIsTransport(t *testing.T) {
	pad := strings.Repeat("x", 32<<10)
	// producing is how long the upstream spent between its first and last
	// token other than blocked in writes: the only time the proxy can have
	// waited on it, on a busy machine too.
	producing := make(chan time.Duration, 1)
	up := startUpstream(t, func(c *upConn) {
		c.role()
		var start time.Time
		var writing time.Duration
		for i := range 250 { // 8 MB: more than the kernel buffers between us
			if i > 0 {
				time.Sleep(time.Millisecond)
			}
			w := time.Now()
			if i == 0 {
				start = w
			}
			if !c.content(fmt.Sprintf("%d%s", i, pad)) {
				return
			}
			writing += time.Since(w)
		}
		producing <- time.Since(start) - writing
		c.finish("stop")
		c.done()
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	// A small receive window, set before connecting so it takes effect.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { setReceiveBuffer(fd, 16<<10) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	buf := make([]byte, 64<<10)
	for {
		if _, err := conn.Read(buf); err != nil {
			break // the proxy closes after the response (Connection: close)
		}
		time.Sleep(10 * time.Millisecond) // at most ~6 MB/s: slower than the upstream
	}
	r := sink.next(t)
	if r.Reason != endreason.Stop {
		t.Fatalf("record %s/%s (%s)", r.Reason, r.Detail, r.Error)
	}
	// Events that piled up upstream while the proxy was blocked on the
	// client arrive together, but were not held back there.
	if r.Buffering != 0 {
		t.Errorf("buffering %v: the slow client was taken for upstream buffering (%d content events in %d arrivals)", r.Buffering.Kinds(), r.Stream.ContentEvents, r.Stream.Arrivals)
	}
	if r.Stream.Blocked < 100*time.Millisecond {
		t.Errorf("blocked on the client %v, want the slow reads to show (>= 100ms)", r.Stream.Blocked)
	}
	// The rest of the stream's life was the client. Decode (the sum of
	// gaps) holds at most the upstream's own producing time, not that.
	prod := <-producing
	if r.gapSum > prod+r.Stream.Blocked/2 {
		t.Errorf("decode time %v with %v blocked on the client and %v producing upstream: the client's slowness leaked into decode", r.gapSum, r.Stream.Blocked, prod)
	}
	t.Logf("decode %v, blocked on the client %v, producing upstream %v, p50 gap %v", r.gapSum, r.Stream.Blocked, prod, r.gaps.P50)
}

// TestCancellationCost checks the cost of a client that leaves mid-stream
// against the engine's own count: the engine stops within a step when the
// proxy closes the connection, and with the keep_decoding fault (an engine
// that ignores disconnects) the waste shows in the engine's count.
func TestCancellationCost(t *testing.T) {
	eng, url := startEngine(t, refengine.Config{})
	addr, sink, _ := startProxy(t, url, func(c *Config) { c.Engine, c.AllowFaults = "reference", true })
	body := `{"model":"ttftlens-ref","stream":true,"max_tokens":400,"ignore_eos":true,"messages":[{"role":"user","content":"go on"}]}`
	for _, tc := range []struct {
		fault    string
		wasteMin int
		wasteMax int
	}{{"", 0, 2}, {"keep_decoding", 20, 1 << 30}} {
		t.Run("fault="+tc.fault, func(t *testing.T) {
			conn := dialProxy(t, addr)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Ttftlens-Fault: %s\r\nContent-Length: %d\r\n\r\n%s", tc.fault, len(body), body)
			buf := make([]byte, 4096)
			seen := 0
			for seen < 5 { // a few tokens, then leave
				n, err := conn.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				seen += strings.Count(string(buf[:n]), `"content":"`)
			}
			conn.Close()
			r := sink.next(t)
			if r.Reason != endreason.ClientCancel || r.Phase != endreason.PhaseDecoding {
				t.Fatalf("record %s/%s phase %s", r.Reason, r.Detail, r.Phase)
			}
			if r.CancelToClose <= 0 {
				t.Errorf("cancel_to_close %v: the upstream was not cut for the cancel", r.CancelToClose)
			}
			var truth refengine.Truth
			deadline := time.Now().Add(10 * time.Second)
			for { // the engine finishes its account when its handler returns
				var ok bool
				if truth, ok = eng.Truth(r.RequestID); ok && truth.ClientGone && (tc.fault == "" || truth.CompletionTokens >= 400) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("engine truth %+v", truth)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if w := truth.TokensAfterClientLeft; w < tc.wasteMin || w > tc.wasteMax {
				t.Errorf("engine produced %d tokens after the client left, want %d..%d", w, tc.wasteMin, tc.wasteMax)
			}
		})
	}
}
