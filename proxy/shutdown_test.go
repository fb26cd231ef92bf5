package proxy

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
)

// bigContent is a chat chunk of about 16 KiB: a few fill a socket's buffers.
var bigContent = strings.Repeat("x", 16<<10)

// flood streams big content events until the proxy closes the connection.
func flood(c *upConn) {
	c.role()
	for range 10000 {
		if !c.content(bigContent) {
			return
		}
	}
}

// serveToShutdown serves a proxy built from cfg on a loopback port, for a
// test that shuts it down itself; served is closed when Serve returns.
func serveToShutdown(t *testing.T, cfg Config, sink record.Sink) (p *Proxy, addr string, served <-chan struct{}) {
	t.Helper()
	if cfg.ScrapeEngineMetrics == 0 {
		// As startProxy: a scrape of the script's /metrics would be the
		// request a test waits for (up.request).
		cfg.ScrapeEngineMetrics = -1
	}
	p, err := New(cfg, sink, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(ln)
	}()
	return p, ln.Addr().String(), done
}

// TestShutdownCutsInFlight stops a proxy while streams are in flight past
// the shutdown grace: every request still ends in exactly one record
// (deadline / shutdown), every upstream connection is closed (the engines
// stop), also for a client that stopped reading (its write is blocked),
// and Shutdown returns, saying how many it cut.
func TestShutdownCutsInFlight(t *testing.T) {
	const streams = 20
	up := startUpstream(t, func(c *upConn) {
		if strings.Contains(c.body, "stuck") {
			flood(c)
			return
		}
		c.stream(100000, 20*time.Millisecond)
	})
	sink := newCaptureSink(t)
	p, addr, served := serveToShutdown(t, Config{Upstream: up.url}, sink)

	for range streams - 1 {
		_, br := rawClient(t, addr, chatBody)
		readUntil(t, br, "t0 ") // streaming
	}
	// One client reads its headers and then nothing: the proxy's write to
	// it blocks once the socket buffers are full.
	_, br := rawClient(t, addr, strings.Replace(chatBody, `"hi"`, `"stuck"`, 1))
	readUntil(t, br, "\r\n\r\n")
	var conns []*upConn
	for range streams {
		conns = append(conns, up.request(t))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := p.Shutdown(ctx)
	if !errors.Is(err, ErrGraceCut) || !strings.Contains(err.Error(), "cut 20 requests") {
		t.Errorf("Shutdown: %v, want ErrGraceCut saying it cut 20 requests", err)
	}
	<-served
	for range streams {
		r := sink.next(t)
		if r.Reason != endreason.Deadline || r.Detail != endreason.DetailShutdown {
			t.Errorf("record %s/%s (%s), want deadline/shutdown", r.Reason, r.Detail, r.Error)
		}
	}
	sink.none(t, 100*time.Millisecond)
	for i, c := range conns {
		if _, ok := c.waitGone(5 * time.Second); !ok {
			t.Errorf("upstream connection %d still open after the cut", i)
		}
	}
	if n := p.InFlight(); n != 0 {
		t.Errorf("%d requests still in flight", n)
	}
}

// TestClientWriteStall pauses a client that stays connected but stops
// reading a long stream: the request ends as the client's doing
// (client_cancel / client_write_stall), its record is written while the
// client is still paused, and the upstream connection is closed.
func TestClientWriteStall(t *testing.T) {
	up := startUpstream(t, flood)
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.ClientWriteStall = 300 * time.Millisecond })
	conn, br := rawClient(t, addr, chatBody)
	readUntil(t, br, "\r\n\r\n") // then read nothing more

	r := sink.next(t)
	if r.Reason != endreason.ClientCancel || r.Detail != endreason.DetailClientWriteStall || r.Phase != endreason.PhaseDecoding {
		t.Errorf("record %s/%s phase %s, want client_cancel/client_write_stall while decoding", r.Reason, r.Detail, r.Phase)
	}
	if _, ok := up.request(t).waitGone(5 * time.Second); !ok {
		t.Error("upstream connection still open")
	}
	conn.Close()
}

// TestClientWriteStallSparesSlowReaders checks that the limit counts only
// time the client takes no bytes: a client that reads slowly but steadily,
// and an upstream silent for longer than the limit between events, do not
// end the request.
func TestClientWriteStallSparesSlowReaders(t *testing.T) {
	const stall = 300 * time.Millisecond
	up := startUpstream(t, func(c *upConn) {
		c.role()
		for i := range 12 {
			if !c.content(bigContent[:4<<10]) {
				return
			}
			if i == 5 {
				time.Sleep(2 * stall) // silent upstream, attentive client
			}
		}
		c.finish("stop")
		c.done()
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.ClientWriteStall = stall })
	_, br := rawClient(t, addr, chatBody)
	buf := make([]byte, 1<<10)
	var got strings.Builder
	for !strings.Contains(got.String(), "[DONE]") {
		time.Sleep(2 * time.Millisecond) // slow, and steady
		n, err := br.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("read: %v after %d bytes", err, got.Len())
		}
	}
	if r := sink.next(t); r.Reason != endreason.Stop {
		t.Errorf("record %s/%s, want stop", r.Reason, r.Detail)
	}
}

// TestShutdownBeforeServe: a Serve that starts after Shutdown began, or
// races it, returns, its listener closed: fasthttp's Shutdown alone closes
// only the listeners its Serve has already taken, and the Serve that took
// one later accepted until the process ended.
func TestShutdownBeforeServe(t *testing.T) {
	for _, race := range []bool{false, true} {
		p, err := New(Config{Upstream: "http://127.0.0.1:1", ScrapeEngineMetrics: -1}, newCaptureSink(t), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		serve := func() { served <- p.Serve(ln) }
		if race {
			go serve()
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("race %v: Shutdown: %v", race, err)
		}
		if !race {
			go serve()
		}
		if err := <-served; err != nil {
			t.Errorf("race %v: Serve: %v", race, err)
		}
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			t.Errorf("race %v: the listener still takes connections", race)
		}
	}
}
