package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/leaktest"
)

// These tests hold a detached stream's connection to what it owes the
// client after the stream (detach.go): the next request on it, the end of
// it when the response says so, its place in the caps and the disconnect
// watcher, and a shutdown's wait.

// detachChat is a chat request body; what the prompt names picks the
// detachUpstream script.
func detachChat(stream bool, prompt string) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, prompt)
}

// chatRequest is a raw HTTP/1.1 chat request with extra header lines.
func chatRequest(body string, extra ...string) string {
	var h strings.Builder
	for _, e := range extra {
		h.WriteString(e + "\r\n")
	}
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", h.String(), len(body), body)
}

// oneWriteStream is a whole event stream in one write: the proxy parses
// the first event and finds the end of the body together, so the stream's
// goroutine may end before fasthttp reports the hijack.
var oneWriteStream = func() string {
	ev := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"one"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		"data: [DONE]\n\n"
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(ev), ev)
}()

// detachUpstream answers a non-streamed request whole, a streamed one by
// its prompt: "short" in one write, "leave" with a first token and then
// silence until the proxy closes the connection, "hold" with a first token
// and the rest once release is closed, anything else three tokens.
func detachUpstream(t *testing.T, release <-chan struct{}) *testUpstream {
	return startUpstream(t, func(c *upConn) {
		switch {
		case !strings.Contains(c.body, `"stream":true`):
			c.whole(200, "application/json", `{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
		case strings.Contains(c.body, "short"):
			c.sent = true
			c.write(oneWriteStream)
		case strings.Contains(c.body, "leave"):
			c.role()
			c.content("x")
			c.waitGone(10 * time.Second)
		case strings.Contains(c.body, "hold"):
			c.role()
			c.content("x")
			<-release
			c.stream(1, 0)
		default:
			c.stream(3, 0)
		}
	})
}

// startProxyExact is startProxy that fails the test when, after the
// proxy's shutdown, the sink holds records the test did not take: each
// request ends in exactly one record.
func startProxyExact(t *testing.T, upstreamURL string, mod func(*Config)) (string, *captureSink, *Proxy) {
	t.Helper()
	var sink *captureSink
	t.Cleanup(func() { // runs after startProxy's shutdown
		if n := len(sink.recs); n > 0 {
			t.Errorf("%d records more than requests", n)
		}
	})
	addr, sink, p := startProxy(t, upstreamURL, mod)
	return addr, sink, p
}

// openConns is the client connections the caps count.
func openConns(p *Proxy) int {
	p.limits.mu.Lock()
	defer p.limits.mu.Unlock()
	return p.limits.open
}

// goroutinesLeft returns a check, for the end of a test, that the
// goroutines running now are the only ones left (fasthttp's own sleepers
// aside).
func goroutinesLeft(t *testing.T) func() {
	opts := append(slices.Clone(leaktest.FasthttpSleepers), goleak.IgnoreCurrent())
	return func() { goleak.VerifyNone(t, opts...) }
}

// wholeStream checks a streamed response read to its last chunk.
func wholeStream(t *testing.T, what string, status int, body string, err error) {
	t.Helper()
	if err != nil || status != 200 || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("%s: status %d, error %v, body %q: want the whole stream", what, status, err, body)
	}
}

// TestGivenBackConnectionWaitsOutsideFasthttp: between a stream's end and
// the client's next request the connection waits in the proxy, not in
// fasthttp, which takes a connection it is given for a new one (its read
// timeout would run from the stream's end, and a shutdown would wait up to
// 5 s for it to count as idle); the next request on it is served.
func TestGivenBackConnectionWaitsOutsideFasthttp(t *testing.T) {
	up := detachUpstream(t, nil)
	addr, sink, p := startProxyExact(t, up.url, nil)
	client := dialKeepAlive(t, addr)
	_ = client.conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard, not a measure
	resp, body, err := client.do("POST", "/v1/chat/completions", detachChat(true, "hi"))
	wholeStream(t, "the stream", resp.StatusCode, body, err)
	sink.next(t)
	waitFor(t, func() bool { return p.server.GetOpenConnectionsCount() == 0 })
	if n := p.server.GetOpenConnectionsCount(); n != 0 {
		t.Fatalf("fasthttp counts %d connections while the only one waits for its next request", n)
	}
	resp, body, err = client.do("POST", "/v1/chat/completions", detachChat(true, "hi"))
	wholeStream(t, "the next request on the connection", resp.StatusCode, body, err)
	sink.next(t)
}

// TestNeverDetachedStreamEnds: when fasthttp closes a connection without
// handing it over (StateClosed for a connection whose stream waits for its
// hijack), the stream's request ends there, in one record, as a client
// cancellation, and the connection's entry goes.
func TestNeverDetachedStreamEnds(t *testing.T) {
	up := detachUpstream(t, nil)
	_, sink, p := startProxy(t, up.url, nil)
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/chat/completions")
	ctx.Init(&req, nil, nil)
	x := p.acquire()
	x.begin(&ctx)
	conn := discardConn{}
	x.client.conn = conn
	x.streaming = true
	p.detached.Store(conn, &handoff{x: x})
	p.neverDetached(conn) // what connState does first for StateClosed
	if r := sink.next(t); r.Reason != endreason.ClientCancel {
		t.Errorf("record %s/%s, want client_cancel", r.Reason, r.Detail)
	}
	if _, ok := p.detached.Load(conn); ok {
		t.Error("the connection's entry is left")
	}
	if n := p.InFlight(); n != 0 {
		t.Errorf("%d requests in flight", n)
	}
}

// TestDetachedStreamsKeepTheConnection sends streams one after another on
// one client connection, then a non-streamed request, then a stream the
// client leaves while the upstream is silent: each stream is whole and in
// one record, the connection counts once against the caps, the disconnect
// watcher still sees the client leave (nothing is written to it then), and
// the connection leaves the caps once closed.
func TestDetachedStreamsKeepTheConnection(t *testing.T) {
	up := detachUpstream(t, nil)
	addr, sink, p := startProxyExact(t, up.url, func(c *Config) { c.MaxConns, c.MaxConnsPerClient = 10, 1 })
	client := dialKeepAlive(t, addr)
	_ = client.conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard, not a measure
	for i, stream := range []bool{true, true, true, false, true} {
		resp, body, err := client.do("POST", "/v1/chat/completions", detachChat(stream, "hi"))
		what := fmt.Sprintf("request %d (stream %v)", i, stream)
		switch {
		case err != nil || resp.StatusCode != 200:
			t.Fatalf("%s: %v %v", what, resp, err)
		case resp.Close:
			t.Errorf("%s: response says Connection: close", what)
		case stream:
			wholeStream(t, what, resp.StatusCode, body, err)
		}
		if r := sink.next(t); r.Reason != endreason.Stop || r.Status != 200 {
			t.Errorf("%s: record %s/%s status %d", what, r.Reason, r.Detail, r.Status)
		}
	}
	if n := openConns(p); n != 1 {
		t.Errorf("one connection after its streams counted %d times", n)
	}
	over := dialProxy(t, addr)
	if resp, _ := rawResponse(t, over, bufio.NewReader(over)); resp.StatusCode != 429 {
		t.Errorf("a second connection at a per-client cap of 1: %d, want 429", resp.StatusCode)
	}

	fmt.Fprint(client.conn, chatRequest(detachChat(true, "leave")))
	readUntil(t, client.br, `"content":"x"`)
	client.conn.Close()
	if r := sink.next(t); r.Reason != endreason.ClientCancel || r.Detail != endreason.DetailClientClosed {
		t.Errorf("the client left a stream on its kept connection: record %s/%s, want client_cancel/client_closed", r.Reason, r.Detail)
	}
	waitFor(t, func() bool { return openConns(p) == 0 })
	if n := openConns(p); n != 0 {
		t.Fatalf("%d connections counted after the client closed its one", n)
	}
	resp, body, err := dialKeepAlive(t, addr).do("POST", "/v1/chat/completions", detachChat(true, "hi"))
	wholeStream(t, "a new connection after the cap freed", resp.StatusCode, body, err)
	sink.next(t)
}

// TestDetachedStreamEndsTheConnection writes each row's requests at once
// and reads the first response, a stream: whole, in one record, and the
// connection goes on or ends. A client that asks for the close gets
// Connection: close in the head. A request pipelined behind the stream is
// not answered (fasthttp read it ahead; the head went out with the first
// event, before the proxy could see it): the connection ends with the
// stream, and the client may send it again (RFC 9112 §9.3.2).
func TestDetachedStreamEndsTheConnection(t *testing.T) {
	stream := chatRequest(detachChat(true, "hi"))
	tests := []struct {
		name      string
		requests  string
		headClose bool // the head says Connection: close
		wantClose bool // the connection ends after the stream
	}{
		{"keep-alive", stream, false, false},
		{"client asks Connection: close", chatRequest(detachChat(true, "hi"), "Connection: close"), true, true},
		{"pipelined stream", stream + stream, false, true},
		{"pipelined health", stream + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, true},
		{"short stream, pipelined", chatRequest(detachChat(true, "short")) + stream, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := detachUpstream(t, nil)
			addr, sink, _ := startProxyExact(t, up.url, nil)
			conn := dialProxy(t, addr)
			if _, err := io.WriteString(conn, tt.requests); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, body := rawResponse(t, conn, br) // to the last chunk
			wholeStream(t, "the stream", resp.StatusCode, string(body), nil)
			if resp.Close != tt.headClose {
				t.Errorf("response Connection: close %v, want %v", resp.Close, tt.headClose)
			}
			if r := sink.next(t); r.Reason != endreason.Stop {
				t.Errorf("record %s/%s", r.Reason, r.Detail)
			}
			if tt.wantClose {
				if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
					t.Errorf("after the stream: %q, %v; want the connection closed", rest, err)
				}
				return
			}
			fmt.Fprint(conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp, _ := rawResponse(t, conn, br); resp.StatusCode != 200 {
				t.Errorf("the next request on the connection: %d", resp.StatusCode)
			}
		})
	}
}

// TestShortDetachedStreams repeats streams whose first event and end come
// in one upstream write, so the stream's end races fasthttp's report of
// the hijack, on one kept-alive connection and on many at once: each is
// whole and in one record by the end of the shutdown, the caps are back to zero once the clients
// close, and no goroutine is left after the shutdown.
func TestShortDetachedStreams(t *testing.T) {
	tests := []struct {
		name                   string
		conns, requestsPerConn int
	}{
		{"one connection", 1, 300},
		{"many connections", 30, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines := goroutinesLeft(t)
			up := detachUpstream(t, nil)
			sink := newCaptureSink(t)
			p, addr, served := serveToShutdown(t, Config{Upstream: up.url, MaxConns: 100, MaxConnsPerClient: -1}, sink)
			var wg sync.WaitGroup
			var clients []*keepAliveClient
			for range tt.conns {
				client := dialKeepAlive(t, addr)
				_ = client.conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a hang guard
				clients = append(clients, client)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tt.requestsPerConn {
						resp, body, err := client.do("POST", "/v1/chat/completions", detachChat(true, "short"))
						if err != nil || resp.StatusCode != 200 || resp.Close || !strings.Contains(body, "data: [DONE]") {
							t.Errorf("request %d: %v %v %q", i, resp, err, body)
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, c := range clients {
				c.conn.Close()
			}
			waitFor(t, func() bool { return openConns(p) == 0 })
			if n := openConns(p); n != 0 {
				t.Errorf("%d connections counted after every client closed", n)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			<-served
			// Every record is written once the shutdown is done (a stream's
			// record follows the write that ended its body).
			if n, want := len(sink.recs), tt.conns*tt.requestsPerConn; n != want {
				t.Errorf("%d records for %d requests", n, want)
			}
			for len(sink.recs) > 0 {
				if r := <-sink.recs; r.Reason != endreason.Stop {
					t.Errorf("record %s/%s", r.Reason, r.Detail)
				}
			}
			up.close()
			checkGoroutines()
		})
	}
}

// TestShutdownWaitsForDetachedStream shuts the proxy down with a detached
// stream in flight and a connection given back to fasthttp idle: the
// stream, let go once fasthttp's own shutdown is done, ends naturally in
// its record before Shutdown returns, then its connection closes; the idle
// connection is closed; no goroutine is left.
func TestShutdownWaitsForDetachedStream(t *testing.T) {
	checkGoroutines := goroutinesLeft(t)
	release := make(chan struct{})
	up := detachUpstream(t, release)
	sink := newCaptureSink(t)
	p, addr, served := serveToShutdown(t, Config{Upstream: up.url}, sink)

	idle := dialKeepAlive(t, addr)
	_ = idle.conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard
	resp, body, err := idle.do("POST", "/v1/chat/completions", detachChat(true, "hi"))
	wholeStream(t, "the stream before", resp.StatusCode, body, err)
	sink.next(t)
	if resp, _, err := idle.do("GET", "/health", ""); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the connection after its stream: %v %v", resp, err) // now served by fasthttp again
	}

	conn, br := rawClient(t, addr, detachChat(true, "hold"))
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard
	readUntil(t, br, `"content":"x"`)
	shut := make(chan error, 1)
	go func() { shut <- p.Shutdown(context.Background()) }()
	// fasthttp's shutdown is over when it counts -1 open connections (it
	// counts its listener while not stopping): Shutdown waits for the
	// detached stream from here.
	waitFor(t, func() bool { return p.server.GetOpenConnectionsCount() < 0 })
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	select {
	case r := <-sink.recs:
		if r.Reason != endreason.Stop {
			t.Errorf("the stream in flight at shutdown: record %s/%s, want stop", r.Reason, r.Detail)
		}
	default:
		t.Error("Shutdown returned before the stream in flight ended in its record")
	}
	if rest, err := io.ReadAll(br); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n\r\n0\r\n\r\n") {
		t.Errorf("the stream in flight at shutdown: rest %q, %v; want its end, then the close", rest, err)
	}
	if rest, err := io.ReadAll(idle.br); err != nil || len(rest) > 0 {
		t.Errorf("the idle connection: %q, %v; want it closed", rest, err)
	}
	<-served
	up.close()
	checkGoroutines()
}
