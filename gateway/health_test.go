package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		want     []time.Duration // the waits after failures in a row
	}{
		{"doubles up to the interval", 5 * time.Second, []time.Duration{
			100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
			1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}},
		{"cut short by the interval", 300 * time.Millisecond, []time.Duration{
			100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}},
		{"interval under the first retry", 20 * time.Millisecond, []time.Duration{
			20 * time.Millisecond, 20 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var last time.Duration
			for i, want := range tc.want {
				if last = retryAfter(last, tc.interval); last != want {
					t.Fatalf("wait after failure %d: %v, want %v", i+1, last, want)
				}
			}
		})
	}
}

// probeAnswers is a probe answering results in turn, then passing, and
// the count of its calls.
func probeAnswers(results ...error) (*atomic.Int32, func(ctx context.Context, url string) error) {
	probes := new(atomic.Int32)
	return probes, func(ctx context.Context, url string) error {
		if i := int(probes.Add(1)) - 1; i < len(results) {
			return results[i]
		}
		return nil
	}
}

// checkedPool is one model on one pool of one upstream, http://a:1, probed
// at /h every hour, never ejected passively.
func checkedPool() *Config {
	return &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"},
			Health: HealthConfig{Path: "/h", Interval: time.Hour}, Ejection: EjectionConfig{ConsecutiveFailures: -1}}},
	}
}

// TestProbeBackoff steps the checker through its waits: while the probe
// fails it probes again after 100 ms, 200 ms, 400 ms; a pass waits the
// whole interval; the next failure starts again at 100 ms. Each wait
// follows exactly one probe. Meanwhile a refused request is told to come
// back when the next probe is due, not after the interval.
func TestProbeBackoff(t *testing.T) {
	probes, probe := probeAnswers(errRefused, errRefused, errRefused, nil, errRefused, nil)
	g, clk := newGateway(t, checkedPool(), Options{Probe: probe})
	g.Start()
	s := g.Snapshot()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, time.Hour, 100 * time.Millisecond, time.Hour}
	for i, w := range want {
		d := clk.WaitArmed(1) // the checker sleeps
		if d != w || int(probes.Load()) != i+1 {
			t.Fatalf("wait %d: %v after %d probes, want %v after %d", i+1, d, probes.Load(), w, i+1)
		}
		if i == 0 {
			if _, rej := s.Pick(s.Routes()[0], nil); rej == nil || rej.RetryAfter != 1 {
				t.Fatalf("pick while the next probe is 100ms away: %+v, want Retry-After 1", rej)
			}
		}
		clk.Advance(d)
	}
	g.Stop()
}

// TestWatchProbes: the probe watchers hear of the first probe that passes
// and of the first after each failure, not of every pass.
func TestWatchProbes(t *testing.T) {
	probes, probe := probeAnswers(errRefused, errRefused, nil, nil, errRefused, nil, nil)
	var told atomic.Int32
	g, clk := newGateway(t, checkedPool(), Options{Probe: probe})
	g.WatchProbes(func(u *Upstream) {
		if u.URL != "http://a:1" {
			t.Errorf("told of %s", u.URL)
		}
		told.Add(1)
	})
	g.Start()
	defer g.Stop()
	want := []int32{0, 0, 1, 1, 1, 2, 2} // after each probe
	for i, w := range want {
		d := clk.WaitArmed(1) // the checker sleeps: the probe and its verdict are done
		if int(probes.Load()) != i+1 || told.Load() != w {
			t.Fatalf("after probe %d (%d made): told %d times, want %d", i+1, probes.Load(), told.Load(), w)
		}
		clk.Advance(d)
	}
}

// TestUpstreamUpAfterStart: an upstream that starts listening after the
// gateway started is back in rotation by a probe long before the health
// interval (an hour: only the retries after failures can explain it), and
// AppendHealth says not ready, and why, until then.
func TestUpstreamUpAfterStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the upstream starts
	logs, log := captureLog()
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "gpu"}},
		Pools: []PoolConfig{{Name: "gpu", Upstreams: []string{"http://" + addr},
			Health: HealthConfig{Path: "/health", Interval: time.Hour}, Ejection: EjectionConfig{ConsecutiveFailures: -1}}},
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	g, clk := newGateway(t, cfg, Options{Log: log, Probe: HTTPProbe(client)})
	g.Start()
	logs.WaitFor(t, "upstream unhealthy", 1, nil)
	if d := clk.WaitArmed(1); d != firstRetry {
		t.Fatalf("the probe after a failure is %v away, want %v", d, firstRetry)
	}
	body, ready := g.Snapshot().AppendHealth(nil, true)
	var h struct {
		Status, Reason string
		Unhealthy      []struct{ Upstream, Pool, Reason, Error string }
	}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if ready || h.Status != "not_ready" || h.Reason != "no upstream in rotation" || len(h.Unhealthy) != 1 ||
		h.Unhealthy[0].Upstream != addr || h.Unhealthy[0].Pool != "gpu" || h.Unhealthy[0].Reason != "health check failed" ||
		!strings.Contains(h.Unhealthy[0].Error, "connection refused") {
		t.Fatalf("health before the upstream is up: ready %v %s", ready, body)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if srv.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Close()
	clk.Advance(firstRetry)
	up := logs.WaitFor(t, "upstream recovered", 1, nil)
	if up[0]["reason"] != "health check passed" {
		t.Fatalf("recovered: %v", up[0])
	}
	s := g.Snapshot()
	if _, rej := s.Pick(s.Routes()[0], nil); rej != nil {
		t.Fatalf("pick after the upstream came up: %+v", rej)
	}
	if body, ready := s.AppendHealth(nil, true); !ready || string(body) != `{"status":"ok"}` {
		t.Fatalf("health after the upstream came up: ready %v %s", ready, body)
	}
	g.Stop()
}

// TestAppendHealth: the answer for each state of a two-pool gateway.
func TestAppendHealth(t *testing.T) {
	var down atomic.Value // map[string]bool: the URLs whose probe fails
	down.Store(map[string]bool{})
	probe := func(ctx context.Context, url string) error {
		if down.Load().(map[string]bool)[url] {
			return errRefused
		}
		return nil
	}
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}, {Model: "n", Pool: "q"}},
		Pools: []PoolConfig{
			{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"}, Health: HealthConfig{Path: "/h"}},
			{Name: "q", Upstreams: []string{"http://c:1"},
				Ejection: EjectionConfig{ConsecutiveFailures: 1, Duration: time.Minute}},
		},
	}
	g, clk := newGateway(t, cfg, Options{Probe: probe})
	s := g.Snapshot()
	p, c := s.Pools()[0], s.Pools()[1].Upstreams[0]
	since := func(d time.Duration) string { return g.start.Add(d).UTC().Format(time.RFC3339) }
	errText := `"error":"address a:1: connection refused"`
	tests := []struct {
		name  string
		act   func()
		ready bool
		want  string
	}{
		{"all in rotation", func() { probeAll(context.Background(), p, probe) }, true, `{"status":"ok"}`},
		{"one out of three", func() {
			clk.Advance(10 * time.Second)
			down.Store(map[string]bool{"http://a:1/h": true})
			probeAll(context.Background(), p, probe)
			clk.Advance(1500 * time.Millisecond)
		}, true, `{"status":"ok","out_of_rotation":1,"unhealthy":[{"upstream":"a:1","pool":"p","reason":"health check failed",` +
			errText + `,"unhealthy_since":"` + since(10*time.Second) + `","unhealthy_for":"1.5s"}]}`},
		{"every pool out", func() {
			down.Store(map[string]bool{"http://a:1/h": true, "http://b:1/h": true})
			probeAll(context.Background(), p, probe)
			g.Done(c, false)
			clk.Advance(time.Second)
		}, false, `{"status":"not_ready","reason":"no upstream in rotation","out_of_rotation":3,"unhealthy":[` +
			`{"upstream":"a:1","pool":"p","reason":"health check failed",` + errText + `,"unhealthy_since":"` + since(10*time.Second) + `","unhealthy_for":"2.5s"},` +
			`{"upstream":"b:1","pool":"p","reason":"health check failed",` + errText + `,"unhealthy_since":"` + since(11500*time.Millisecond) + `","unhealthy_for":"1s"},` +
			`{"upstream":"c:1","pool":"q","reason":"passive ejection","unhealthy_since":"` + since(11500*time.Millisecond) + `","unhealthy_for":"1s"}]}`},
		{"the ejection over", func() { clk.Advance(time.Minute) }, true,
			`{"status":"ok","out_of_rotation":2,"unhealthy":[` +
				`{"upstream":"a:1","pool":"p","reason":"health check failed",` + errText + `,"unhealthy_since":"` + since(10*time.Second) + `","unhealthy_for":"1m2.5s"},` +
				`{"upstream":"b:1","pool":"p","reason":"health check failed",` + errText + `,"unhealthy_since":"` + since(11500*time.Millisecond) + `","unhealthy_for":"1m1s"}]}`},
	}
	for _, tc := range tests {
		tc.act()
		body, ready := s.AppendHealth(nil, true)
		if ready != tc.ready || string(body) != tc.want {
			t.Errorf("%s: ready %v\n%s\nwant ready %v\n%s", tc.name, ready, body, tc.ready, tc.want)
		}
		if !json.Valid(body) {
			t.Errorf("%s: not JSON: %s", tc.name, body)
		}
		// Without detail: the same verdict and count, no address or error.
		summary, _, _ := strings.Cut(tc.want, `,"unhealthy":[`)
		if !strings.HasSuffix(summary, "}") {
			summary += "}"
		}
		if body, ready := s.AppendHealth(nil, false); ready != tc.ready || string(body) != summary {
			t.Errorf("%s without detail: ready %v\n%s\nwant\n%s", tc.name, ready, body, summary)
		}
	}
}
