package proxy

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// eventEnd closes every content event the flood upstream sends.
const eventEnd = "}}]}\n\n"

// floodUpstream is an engine that ignores its client leaving: it writes
// content events as fast as the proxy takes them until its write fails
// (the proxy closed the connection). written counts the whole events
// written; blocked is closed once the proxy stopped reading them (no
// progress between two looks, a tenth of a second apart), once whatever
// requests reach it (the proxy's own identification and scrapes too).
type floodUpstream struct {
	*testUpstream
	written     atomic.Int64
	blocked     chan struct{}
	blockedOnce sync.Once
}

func startFloodUpstream(t *testing.T) *floodUpstream {
	u := &floodUpstream{blocked: make(chan struct{})}
	text := strings.Repeat("x", 1000)
	u.testUpstream = startUpstream(t, func(c *upConn) {
		stop := make(chan struct{})
		defer close(stop)
		go u.watchProgress(stop)
		c.role()
		for c.content(text) {
			u.written.Add(1)
		}
	})
	return u
}

func (u *floodUpstream) watchProgress(stop <-chan struct{}) {
	last := int64(-1)
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		if n := u.written.Load(); n > 0 && n == last {
			u.blockedOnce.Do(func() { close(u.blocked) })
			return
		}
		last = u.written.Load()
	}
}

// TestTokensAfterCancel checks the waste of a cancel against an engine that
// keeps generating after its client left: the content events the proxy
// held for a client that left (it was not reading) are in the record's
// tokens_after_cancel and in ttftlens_tokens_after_cancel_total, and a
// client that leaves with nothing held costs none.
func TestTokensAfterCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stall  time.Duration // the client write stall limit
		detail endreason.Detail
		// how the client ends: it leaves (RST) once the proxy is blocked on
		// it, or never reads past the first event and waits for the stall.
		leave bool
	}{
		{"left while the proxy was blocked on it", time.Minute, endreason.DetailClientClosed, true},
		{"stalled", 300 * time.Millisecond, endreason.DetailClientWriteStall, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startFloodUpstream(t)
			reg := prometheus.NewRegistry()
			metrics := exporters.NewMetrics(reg, exporters.MetricOptions{})
			sink := newCaptureSink(t) // after metrics: a record it has is counted
			p, err := New(Config{Upstream: up.url, ClientWriteStall: tc.stall}, record.Sinks{metrics, sink}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			addr := serveProxy(t, p, nil)

			conn := slowReader(t, addr)
			got := make([]byte, 64<<10)
			n, err := conn.Read(got) // the headers and the first events; then it stops reading
			if err != nil {
				t.Fatal(err)
			}
			seen := strings.Count(string(got[:n]), eventEnd)
			if tc.leave {
				<-up.blocked
				_ = conn.(*net.TCPConn).SetLinger(0)
				_ = conn.Close()
			}
			r := sink.next(t)
			if r.Reason != endreason.ClientCancel || r.Detail != tc.detail {
				t.Fatalf("record %s/%s, want client_cancel/%s", r.Reason, r.Detail, tc.detail)
			}
			written := int(up.written.Load())
			held := r.TokensAfterCancel
			// The event being written when the client left may have reached
			// the client's socket whole but for the chunk's end: one over.
			if held < 1 || seen+held > written+1 {
				t.Errorf("tokens_after_cancel %d: the upstream wrote %d events, the client got %d", held, written, seen)
			}
			if m := counterValue(t, reg, "ttftlens_tokens_after_cancel_total"); m != float64(held) {
				t.Errorf("ttftlens_tokens_after_cancel_total = %v, want the record's %d", m, held)
			}
			t.Logf("upstream wrote %d, client got %d, held %d", written, seen, held)
		})
	}
}

// TestNoTokensAfterCancelWhenNothingHeld: a client that leaves while the
// proxy waits on the upstream wasted nothing the proxy saw, however long
// the engine goes on afterwards (the proxy closes it at once).
func TestNoTokensAfterCancelWhenNothingHeld(t *testing.T) {
	up := startUpstream(t, func(c *upConn) {
		c.role()
		c.content("one")
		c.waitGone(5 * time.Second)
		for c.content("ignored") { // keeps generating until its write fails
		}
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	conn, br := rawClient(t, addr, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	readUntil(t, br, `"one"`)
	conn.Close()
	r := sink.next(t)
	if r.Reason != endreason.ClientCancel || r.TokensAfterCancel != 0 {
		t.Errorf("record %s/%s tokens_after_cancel %d, want client_cancel with 0", r.Reason, r.Detail, r.TokensAfterCancel)
	}
}

// slowReader sends a streamed chat request on a connection with a small
// receive buffer, so the proxy blocks on it soon once it stops reading.
func slowReader(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn := dialProxy(t, addr)
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return conn
}

// counterValue is the value of an unlabelled counter in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// abortingConn is a client connection that aborts its request at its first
// write.
type abortingConn struct {
	net.Conn
	abort func()
}

func (c *abortingConn) Write(p []byte) (int, error) {
	if c.abort != nil {
		c.abort()
		c.abort = nil
	}
	return len(p), nil
}

// TestRelayStopsWhenTheClientLeft: once the client left (or stopped
// reading), the relay hands out nothing more of what it already read from
// the upstream (undelivered counts it); after any other abort (a deadline)
// the client is still there and gets what was read before the close.
func TestRelayStopsWhenTheClientLeft(t *testing.T) {
	const n = 10
	for _, tc := range []struct {
		cause  error
		events int // relayed in all; 0: those of the first write, which saw the abort
	}{
		{errClientGone, 0},
		{errClientStalled, 0},
		{errTTFTDeadline, n + 3},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			h := newRelayHarness(t, relayStream(n))
			x, r := h.x, &h.x.relay
			x.sig.Begin(engines.KindGeneric, noRequestHeaders)
			x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
			gen := x.ctl.begin(x.fin.rec.Timeline.Now)
			r.src.scan.Reset(h.src)
			want := tc.events
			x.client.conn = &abortingConn{abort: func() {
				x.ctl.abort(gen, tc.cause)
				if want == 0 {
					want = x.fin.rec.Stream.Events
				}
			}}
			_, err := r.WriteTo(streamWriter{x})
			if err != tc.cause || x.fin.rec.Stream.Events != want {
				t.Errorf("relayed %d events, ended with %v; want %d, %v", x.fin.rec.Stream.Events, err, want, tc.cause)
			}
		})
	}
}
