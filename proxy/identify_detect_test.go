package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/logtest"
	"github.com/ttftlens/ttftlens/proxy/engines"
)

// closedAddr returns a loopback address nothing listens on (yet).
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// serveAt starts an HTTP server on addr (the upstream coming up).
func serveAt(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

const vllmModels = `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm"}]}`

const (
	msgNotUnreachable = "engine not identified: upstream unreachable, will retry"
	msgNotReady       = "engine not identified: upstream not ready, will retry"
	msgIdentified     = "engine identified"
)

// TestIdentifyRetries drives identification directly, with no timer in the
// way (the retry waits an hour unless a request nudges it): an upstream
// that refuses connections is logged as unreachable, once as a warning;
// the retry a request asks for fails quietly (debug); a 503 without an
// engine's mark is "not ready", a new warning; the answer that finally
// comes names the engine, and only then is the kind set.
func TestIdentifyRetries(t *testing.T) {
	addr := closedAddr(t)
	logs := &logtest.Lines{}
	p := &Proxy{log: zerolog.New(logs), cfg: Config{Clock: clock.Real}}
	u, err := newUpstream("http://"+addr, "up", defaultUpstreamHeaderBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.identify(ctx, u, "http://"+addr, retrySchedule{first: time.Hour, max: time.Hour})
	}()

	warn := logs.WaitFor(t, msgNotUnreachable, 1, nil)[0]
	if warn["level"] != "warn" || warn["upstream"] != "up" || warn["attempt"] != 1.0 || warn["retry_in"] != "1h0m0s" ||
		!strings.Contains(warn["error"].(string), "connection refused") || len(warn) != 6 {
		t.Errorf("first failure: %v", warn)
	}
	nudge := func() {
		if k := u.kind.get(); k != engines.KindGeneric { // what a request does
			t.Errorf("kind %q before identification", k)
		}
	}
	again := logs.WaitFor(t, msgNotUnreachable, 2, nudge)[1]
	if again["level"] != "debug" || again["attempt"] != 2.0 {
		t.Errorf("second failure: %v", again)
	}

	var ready atomic.Bool
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, vllmModels)
	}))
	notReady := logs.WaitFor(t, msgNotReady, 1, nudge)[0]
	if notReady["level"] != "warn" || notReady["error"] != "GET http://"+addr+"/v1/models: status 503" {
		t.Errorf("not ready: %v", notReady)
	}
	if u.kind.v.Load() != nil {
		t.Fatal("kind settled before the upstream answered")
	}

	ready.Store(true)
	ok := logs.WaitFor(t, msgIdentified, 1, nudge)[0]
	<-done
	if ok["level"] != "info" || ok["upstream"] != "up" || ok["engine"] != engines.KindVLLM || ok["attempts"] == nil || len(ok) != 5 {
		t.Errorf("identified: %v", ok)
	}
	if k := u.kind.get(); k != engines.KindVLLM {
		t.Errorf("kind %q", k)
	}
	if got := logs.With(t, msgIdentified); len(got) != 1 {
		t.Errorf("identified %d times", len(got))
	}
	if u.kind.wake.Load() != nil {
		t.Error("a finished identification still takes nudges")
	}
}

// TestIdentifyStopsWithProxy: identification of an upstream that never
// comes up ends when ctx does (the proxy's Shutdown), quietly.
func TestIdentifyStopsWithProxy(t *testing.T) {
	addr := closedAddr(t)
	logs := &logtest.Lines{}
	p := &Proxy{log: zerolog.New(logs), cfg: Config{Clock: clock.Real}}
	u, _ := newUpstream("http://"+addr, "up", defaultUpstreamHeaderBytes, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.identify(ctx, u, "http://"+addr, retrySchedule{first: time.Hour, max: time.Hour})
	}()
	logs.WaitFor(t, msgNotUnreachable, 1, nil)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("identification outlived its context")
	}
	if got := logs.With(t, msgIdentified); len(got) != 0 {
		t.Errorf("identified an upstream that never answered: %v", got)
	}
}

// TestIdentifyReachableButUnknown: an upstream that answers without an
// engine's mark is generic, at once (no retries): it was reached.
func TestIdentifyReachableButUnknown(t *testing.T) {
	addr := closedAddr(t)
	serveAt(t, addr, http.NotFoundHandler())
	logs := &logtest.Lines{}
	p := &Proxy{log: zerolog.New(logs), cfg: Config{Clock: clock.Real}}
	u, _ := newUpstream("http://"+addr, "up", defaultUpstreamHeaderBytes, nil)
	p.identify(context.Background(), u, "http://"+addr, retrySchedule{first: time.Hour, max: time.Hour})
	got := logs.All(t)
	if len(got) != 1 || got[0]["message"] != msgIdentified || got[0]["engine"] != engines.KindGeneric || got[0]["attempts"] != nil {
		t.Errorf("log %v", got)
	}
}

// TestAutoEngineUpstreamComesUp is the whole path without --config: the
// proxy with --engine auto in front of an upstream that refuses at first.
// The first request fails and the log says the engine is not identified
// (not "generic"); when the upstream comes up, requests nudge the retry,
// the log names vLLM, and from then on the proxy treats it as vLLM (it asks
// a stream for its usage, which only the vLLM reader does).
func TestAutoEngineUpstreamComesUp(t *testing.T) {
	addr := closedAddr(t)
	logs := &logtest.Lines{}
	proxyAddr := startProxyLogged(t, "http://"+addr, zerolog.New(logs).Level(zerolog.InfoLevel), func(c *Config) {
		c.Engine = EngineAuto
		c.UpstreamName = "engine"
	})
	resp, _, err := post(t, proxyAddr, chatBody)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode < 500 {
		t.Fatalf("status %d from a refusing upstream", resp.StatusCode)
	}
	logs.WaitFor(t, msgNotUnreachable, 1, nil)
	if got := logs.With(t, msgIdentified); len(got) != 0 {
		t.Fatalf("identified a refusing upstream: %v", got)
	}

	bodies := make(chan string, 1000)
	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, vllmModels)
			return
		}
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+"data: [DONE]\n\n")
	}))
	request := func() {
		if resp, _, err := post(t, proxyAddr, chatBody); err != nil || resp.StatusCode != 200 {
			t.Errorf("request after the upstream came up: %v %v", resp.StatusCode, err)
		}
	}
	ok := logs.WaitFor(t, msgIdentified, 1, request)[0]
	if ok["engine"] != engines.KindVLLM || ok["upstream"] != "engine" {
		t.Errorf("identified: %v", ok)
	}
	for len(bodies) > 0 {
		<-bodies
	}
	request()
	if b := <-bodies; !strings.Contains(b, `"include_usage":true`) {
		t.Errorf("identified as vLLM but the stream was not asked for usage: %s", b)
	}
	if got := logs.With(t, msgNotUnreachable); len(got) != 1 {
		t.Errorf("%d warnings for one outage (info level): %v", len(got), got)
	}
}

// startProxyLogged is startProxy with the proxy's operational log going to
// log.
func startProxyLogged(t *testing.T, upstreamURL string, log zerolog.Logger, mod func(*Config)) string {
	t.Helper()
	cfg := Config{Upstream: upstreamURL, ScrapeEngineMetrics: -1} // as startProxy
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg, newCaptureSink(t), log)
	if err != nil {
		t.Fatal(err)
	}
	return serveProxy(t, p, nil)
}
