package proxy

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// TestHealthReadiness: behind a gateway whose only upstream starts after
// the proxy, /health answers 503 and says how many upstreams are out (never
// which: that is the admin's /ready, which says which and why);
// a request meanwhile is refused with a Retry-After of the next probe;
// once a probe finds the upstream up (the interval is an hour: only the
// retries after a failed probe can), /health answers 200 and the first
// request succeeds. The gateway's checker waits on a fake clock: the test
// knows a probe is over when the checker waits again, and moves the clock
// to the next.
func TestHealthReadiness(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upAddr := ln.Addr().String()
	ln.Close() // nothing listens there until the upstream starts
	clk := &clock.Fake{}
	addr, sink, p := startGateway(t, `
routes: [{model: m, pool: gpu}]
pools: [{name: gpu, upstreams: [UP], health: {path: /health, interval: 1h}}]
`, map[string]string{"UP": "http://" + upAddr}, func(c *Config) { c.Clock = clk })

	type health struct {
		Status, Reason string
		Unhealthy      []struct{ Upstream, Pool, Reason, Error string }
	}
	get := func() (int, health, string) {
		t.Helper()
		resp, err := testClient().Get("http://" + addr + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var h health
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("/health body %q: %v", b, err)
		}
		return resp.StatusCode, h, string(b)
	}
	// status asks /health and checks its answer.
	status := func(code int) (health, string) {
		t.Helper()
		got, h, body := get()
		if got != code {
			t.Fatalf("/health %d %s, want %d", got, body, code)
		}
		return h, body
	}

	retry := clk.WaitArmed(1) // the first probe failed
	if _, body := status(503); body != `{"status":"not_ready","reason":"no upstream in rotation","out_of_rotation":1}` {
		t.Fatalf("/health before the upstream is up: %s", body)
	}
	var ready fasthttp.RequestCtx
	p.Ready(&ready)
	var h health
	if err := json.Unmarshal(ready.Response.Body(), &h); err != nil {
		t.Fatalf("/ready body %q: %v", ready.Response.Body(), err)
	}
	if ready.Response.StatusCode() != 503 || h.Status != "not_ready" || len(h.Unhealthy) != 1 ||
		h.Unhealthy[0].Upstream != upAddr || h.Unhealthy[0].Pool != "gpu" || h.Unhealthy[0].Reason != "health check failed" ||
		!strings.Contains(h.Unhealthy[0].Error, "connection refused") {
		t.Fatalf("admin /ready before the upstream is up: %d %s", ready.Response.StatusCode(), ready.Response.Body())
	}
	// Told to come back when the next probe is due, not in an hour.
	if resp, _, err := post(t, addr, chat("m", "")); err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("request before the upstream is up: %v %d Retry-After %q", err, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	sink.next(t)

	ln, err = net.Listen("tcp", upAddr)
	if err != nil {
		t.Fatal(err)
	}
	serveUpstream(t, ln, func(c *upConn) {
		if c.req.URL.Path == "/health" {
			c.whole(200, "text/plain", "ok")
			return
		}
		c.stream(2, 0)
	})
	clk.Advance(retry)
	clk.WaitArmed(1) // the next probe passed
	if _, body := status(200); body != `{"status":"ok"}` {
		t.Fatalf("/health once the upstream is up: %s", body)
	}
	if resp, body, err := post(t, addr, chat("m", "")); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request once /health is ok: %v %d %s", err, resp.StatusCode, body)
	}
	if r := sink.next(t); r.Upstream != upAddr {
		t.Errorf("record upstream %q, want %s", r.Upstream, upAddr)
	}
}
