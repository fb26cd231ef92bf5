package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// keepAliveClient sends requests on one kept-alive connection.
type keepAliveClient struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAliveClient {
	t.Helper()
	conn := dialProxy(t, addr)
	t.Cleanup(func() { conn.Close() })
	return &keepAliveClient{conn, bufio.NewReader(conn)}
}

// do sends one request and reads its whole response.
func (c *keepAliveClient) do(method, path, body string) (*http.Response, string, error) {
	fmt.Fprintf(c.conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, len(body), body)
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestWriteStallLeavesNoDeadline checks that a stream's write stall
// deadline does not outlive it: after a stream, the kept-alive connection
// idles past the limit and still serves the next request, one the proxy
// answers itself (/health) and a stream.
func TestWriteStallLeavesNoDeadline(t *testing.T) {
	const stall = 150 * time.Millisecond
	up := startUpstream(t, func(c *upConn) { c.stream(3, 0) })
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.ClientWriteStall = stall })
	client := dialKeepAlive(t, addr)
	for i, req := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", chatBody},
		{"GET", "/health", ""},
		{"POST", "/v1/chat/completions", chatBody},
	} {
		if i > 0 {
			time.Sleep(2 * stall) // idle past the limit
		}
		resp, _, err := client.do(req.method, req.path, req.body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d (%s): %v %v", i, req.path, resp, err)
		}
	}
	for range 2 {
		if r := sink.next(t); r.Reason != endreason.Stop {
			t.Errorf("record %s/%s", r.Reason, r.Detail)
		}
	}
}

// TestWriteStallSparesTheStreamsEnd has an upstream that finishes its
// events and then takes longer than the write stall limit to end its body:
// the client, reading all along, still gets the stream's final chunk.
func TestWriteStallSparesTheStreamsEnd(t *testing.T) {
	const stall = 200 * time.Millisecond
	up := startUpstream(t, func(c *upConn) {
		c.role()
		c.content("a")
		c.finish("stop")
		c.done()
		time.Sleep(2 * stall)
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.ClientWriteStall = stall })
	resp, body, err := dialKeepAlive(t, addr).do("POST", "/v1/chat/completions", chatBody)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("%v %v: the stream did not end cleanly (%q)", resp, err, body)
	}
	if r := sink.next(t); r.Reason != endreason.Stop {
		t.Errorf("record %s/%s", r.Reason, r.Detail)
	}
}

// TestLateCloseIsNotReplayed has the engine take a request on a kept-alive
// connection and die on it (the connection closes with no answer) well
// after the send: it had the request, so it is not sent again.
func TestLateCloseIsNotReplayed(t *testing.T) {
	var seen atomic.Int32
	up := startUpstream(t, func(c *upConn) {
		if seen.Add(1) == 1 {
			c.stream(1, 0) // the connection goes back to the pool
			return
		}
		time.Sleep(3 * staleWindow)
		c.conn.Close()
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	post(t, addr, chatBody)
	sink.next(t)
	resp, _, _ := post(t, addr, chatBody)
	if resp.StatusCode != 502 {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if r := sink.next(t); r.Detail != endreason.DetailClosedBeforeResp {
		t.Errorf("record %s/%s", r.Reason, r.Detail)
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the engine got %d requests, want 2 (the second not replayed)", n)
	}
}

// TestCutConnectionsServeNoMore cuts a request waiting for its upstream at
// the end of the shutdown grace: the client gets its 504, and its kept-alive
// connection is closed, so no request starts after the cut.
func TestCutConnectionsServeNoMore(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.waitGone(10 * time.Second) })
	sink := newCaptureSink(t)
	p, addr, served := serveToShutdown(t, Config{Upstream: up.url}, sink)
	client := dialKeepAlive(t, addr)
	answered := make(chan *http.Response, 1)
	go func() {
		resp, _, _ := client.do("POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		answered <- resp
	}()
	up.request(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = p.Shutdown(ctx)
	<-served
	if resp := <-answered; resp == nil || resp.StatusCode != 504 {
		t.Fatalf("cut request answered %v, want 504", resp)
	}
	if r := sink.next(t); r.Detail != endreason.DetailShutdown {
		t.Errorf("record %s/%s", r.Reason, r.Detail)
	}
	if resp, _, err := client.do("GET", "/health", ""); err == nil {
		t.Errorf("a request after the cut was served: %d", resp.StatusCode)
	}
}
