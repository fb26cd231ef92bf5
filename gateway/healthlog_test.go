package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/logtest"
)

func captureLog() (*logtest.Lines, *zerolog.Logger) {
	c := &logtest.Lines{}
	l := zerolog.New(c)
	return c, &l
}

// wantLines checks the lines' fields (every field of each line: the exact
// shape operators see, without a timestamp).
func wantLines(t *testing.T, got []map[string]any, want ...map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d log lines, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Errorf("line %d: %v, want %v", i, got[i], want[i])
			continue
		}
		for k, w := range want[i] {
			g, ok := got[i][k]
			if !ok {
				t.Errorf("line %d has no %q: %v", i, k, got[i])
				continue
			}
			if ws, isStr := w.(string); isStr && strings.HasPrefix(ws, "~") {
				if gs, _ := g.(string); !strings.Contains(gs, ws[1:]) {
					t.Errorf("line %d %s = %v, want it to contain %q", i, k, g, ws[1:])
				}
				continue
			}
			if g != w {
				t.Errorf("line %d %s = %v (%T), want %v", i, k, g, g, w)
			}
		}
	}
}

// TestHealthTransitionsLogged drives the active health check directly
// (probeAll, no timer) against a real upstream that answers 500, then 200,
// then is gone (a closed port): one line when it goes out, one when it
// comes back, nothing for the checks in between.
func TestHealthTransitionsLogged(t *testing.T) {
	var status atomic.Int32
	status.Store(500)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	name := strings.TrimPrefix(srv.URL, "http://")
	logs, log := captureLog()
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "gpu"}},
		Pools: []PoolConfig{{Name: "gpu", Upstreams: []string{srv.URL},
			Health: HealthConfig{Path: "/health"}, Ejection: EjectionConfig{ConsecutiveFailures: -1}}},
	}
	g, clk := newGateway(t, cfg, Options{Log: log})
	pool := g.Snapshot().Pools()[0]
	u := pool.Upstreams[0]
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	check := func() { probeAll(context.Background(), pool, HTTPProbe(client)) }

	for range 3 {
		check()
		clk.Advance(5 * time.Second)
	}
	if u.Healthy() {
		t.Fatal("healthy after failing checks")
	}
	wantLines(t, logs.Take(t), map[string]any{
		"level": "warn", "message": "upstream unhealthy", "upstream": name, "pool": "gpu",
		"reason": "health check failed", "error": "health check " + srv.URL + "/health: status 500",
	})

	status.Store(200)
	for range 3 {
		check()
	}
	if !u.Healthy() {
		t.Fatal("unhealthy after passing checks")
	}
	wantLines(t, logs.Take(t), map[string]any{
		"level": "info", "message": "upstream recovered", "upstream": name, "pool": "gpu",
		"reason": "health check passed", "unhealthy_for": "15s",
	})

	srv.Close() // nothing listens on the port any more
	for range 3 {
		check()
	}
	wantLines(t, logs.Take(t), map[string]any{
		"level": "warn", "message": "upstream unhealthy", "upstream": name, "pool": "gpu",
		"reason": "health check failed", "error": "~connection refused",
	})
}

// TestEjectionTransitionsLogged: passive ejection logs once when the
// upstream goes out (with the failures and the duration), nothing for the
// failures of requests still in flight, and once when a request finds the
// ejection over.
func TestEjectionTransitionsLogged(t *testing.T) {
	logs, log := captureLog()
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"},
			Ejection: EjectionConfig{ConsecutiveFailures: 3, Duration: 30 * time.Second}}},
	}
	g, clk := newGateway(t, cfg, Options{Log: log})
	s := g.Snapshot()
	r := s.Routes()[0]
	a := r.Pool.Upstreams[0]
	for range 3 {
		g.Done(a, false)
	}
	if !a.Ejected() {
		t.Fatal("not ejected")
	}
	unhealthy := map[string]any{
		"level": "warn", "message": "upstream unhealthy", "upstream": "a:1",
		"reason": "passive ejection", "consecutive_failures": 3.0, "ejected_for": "30s",
	}
	wantLines(t, logs.Take(t), unhealthy)

	clk.Advance(10 * time.Second)
	for range 4 { // requests that were in flight fail too: it stays out, nothing new
		g.Done(a, false)
	}
	for range 5 {
		s.Pick(r, nil)
	}
	wantLines(t, logs.Take(t))

	clk.Advance(31 * time.Second) // the renewed ejection (at 10s) ends at 40s
	for range 5 {
		s.Pick(r, nil)
	}
	wantLines(t, logs.Take(t), map[string]any{
		"level": "info", "message": "upstream recovered", "upstream": "a:1",
		"reason": "ejection ended", "unhealthy_for": "41s",
	})

	// Ejected again, and the ejection ends with no request to see it:
	// the next ejection logs the end of the last one first.
	for range 3 {
		g.Done(a, false)
	}
	clk.Advance(time.Minute)
	for range 3 {
		g.Done(a, false)
	}
	wantLines(t, logs.Take(t), unhealthy, map[string]any{
		"level": "info", "message": "upstream recovered", "upstream": "a:1",
		"reason": "ejection ended", "unhealthy_for": "1m0s",
	}, unhealthy)
}

// TestHealthAndEjectionTogether: an upstream both ejected and failing its
// health check is one "unhealthy" line; the end of the ejection does not
// bring it back while the check fails; the passing check does, once.
func TestHealthAndEjectionTogether(t *testing.T) {
	logs, log := captureLog()
	var healthy atomic.Bool
	probe := func(ctx context.Context, url string) error {
		if healthy.Load() {
			return nil
		}
		return &net.OpError{Op: "dial", Net: "tcp", Err: errRefused}
	}
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"},
			Health:   HealthConfig{Path: "/h"},
			Ejection: EjectionConfig{ConsecutiveFailures: 1, Duration: 10 * time.Second}}},
	}
	g, clk := newGateway(t, cfg, Options{Log: log, Probe: probe})
	s := g.Snapshot()
	r, pool := s.Routes()[0], s.Pools()[0]
	a := pool.Upstreams[0]
	g.Done(a, false)
	probeAll(context.Background(), pool, probe)
	got := logs.Take(t)
	if len(got) != 1 || got[0]["reason"] != "passive ejection" {
		t.Fatalf("lines %v, want the ejection only", got)
	}
	clk.Advance(time.Minute)
	s.Pick(r, nil)
	probeAll(context.Background(), pool, probe)
	wantLines(t, logs.Take(t)) // the ejection is over, the check still fails
	healthy.Store(true)
	probeAll(context.Background(), pool, probe)
	probeAll(context.Background(), pool, probe)
	wantLines(t, logs.Take(t), map[string]any{
		"level": "info", "message": "upstream recovered", "upstream": "a:1", "pool": "p",
		"reason": "health check passed", "unhealthy_for": "1m0s",
	})
	if u, rej := s.Pick(r, nil); rej != nil || u != a {
		t.Fatalf("pick after recovery: %v %+v", u, rej)
	}
}

// TestReloadWithoutChecksLogsRecovery: a reload that drops the health
// checks of an unhealthy upstream's pool brings it back, and says why.
func TestReloadWithoutChecksLogsRecovery(t *testing.T) {
	logs, log := captureLog()
	fail := func(ctx context.Context, url string) error { return errRefused }
	mk := func(path string) *Config {
		return &Config{
			Routes: []RouteConfig{{Model: "m", Pool: "p"}},
			Pools:  []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"}, Health: HealthConfig{Path: path}}},
		}
	}
	g, _ := newGateway(t, mk("/h"), Options{Log: log, Probe: fail})
	probeAll(context.Background(), g.Snapshot().Pools()[0], fail)
	if err := g.Reload(mk("")); err != nil {
		t.Fatal(err)
	}
	got := logs.Take(t)
	if len(got) != 2 || got[0]["message"] != "upstream unhealthy" || got[1]["message"] != "upstream recovered" ||
		got[1]["reason"] != "health check removed" {
		t.Fatalf("lines %v", got)
	}
}

var errRefused = &net.AddrError{Err: "connection refused", Addr: "a:1"}

// probeAll probes every upstream of p once, as its checker would, with no
// wait between.
func probeAll(ctx context.Context, p *Pool, probe ProbeFunc) {
	for _, u := range p.Upstreams {
		_ = probeOnce(ctx, p, u, probe)
	}
}

// TestPassingProbeEndsEjection: a passive ejection ends at the first active
// probe that passes, at once (an engine that restarted, whose killed
// streams ejected it, is back as soon as it answers its health path), with
// one "recovered" line; a probe that fails leaves it ejected.
func TestPassingProbeEndsEjection(t *testing.T) {
	tests := []struct {
		name   string
		probes []bool // the probes after the ejection, in order: true passes
		out    bool   // still out of rotation after them
	}{
		{"a passing probe", []bool{true}, false},
		{"the engine down, then back", []bool{false, false, true}, false},
		{"the engine still down", []bool{false, false}, true},
		{"no probe since", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs, log := captureLog()
			var pass atomic.Bool
			probe := func(ctx context.Context, url string) error {
				if pass.Load() {
					return nil
				}
				return errRefused
			}
			cfg := &Config{
				Routes: []RouteConfig{{Model: "m", Pool: "p"}},
				Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"},
					Health:   HealthConfig{Path: "/h"},
					Ejection: EjectionConfig{ConsecutiveFailures: 5, Duration: 30 * time.Second}}},
			}
			g, clk := newGateway(t, cfg, Options{Log: log, Probe: probe})
			s := g.Snapshot()
			r, pool := s.Routes()[0], s.Pools()[0]
			a := pool.Upstreams[0]
			pass.Store(true)
			probeAll(context.Background(), pool, probe)
			for range 5 {
				g.Done(a, false)
			}
			logs.Take(t) // the ejection's line
			for _, ok := range tc.probes {
				clk.Advance(100 * time.Millisecond)
				pass.Store(ok)
				probeAll(context.Background(), pool, probe)
			}
			u, rej := s.Pick(r, nil)
			if out := rej != nil; out != tc.out {
				t.Fatalf("after the probes: picked %v, rejection %+v; want out of rotation %v", u, rej, tc.out)
			}
			if tc.out {
				if !a.Ejected() {
					t.Fatal("a failing probe ended the ejection")
				}
				// The next probe may end the ejection: the client is told
				// to retry then, not at the ejection's end.
				a.nextProbe.Store(g.now() + int64(1500*time.Millisecond))
				if _, rej := s.Pick(r, nil); rej == nil || rej.RetryAfter != 2 {
					t.Fatalf("Retry-After with the next probe due in 1.5s: %+v, want 2", rej)
				}
				wantLines(t, logs.Take(t))
				return
			}
			if a.Ejected() {
				t.Fatal("still ejected")
			}
			wantLines(t, logs.Take(t), map[string]any{
				"level": "info", "message": "upstream recovered", "upstream": "a:1", "pool": "p",
				"reason": "health check passed", "unhealthy_for": (time.Duration(len(tc.probes)) * 100 * time.Millisecond).String(),
			})
		})
	}
}
