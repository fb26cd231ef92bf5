package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"llama", "llama", true},
		{"llama", "llamas", false},
		{"llama-*", "llama-3", true},
		{"llama-*", "llama-", true},
		{"llama-*", "llama", false},
		{"*-instruct", "qwen-7b-instruct", true},
		{"*-instruct", "qwen-7b-instruct-x", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"a*b*c", "abcbc", true},
		{"q?en", "qwen", true},
		{"q?en", "qen", false},
		{"**", "x", true},
		{"a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, []byte(tt.name)); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.pattern, tt.name, got)
		}
	}
}

func TestRouteExactBeatsGlob(t *testing.T) {
	cfg := &Config{
		Routes: []RouteConfig{{Model: "*", Pool: "a"}, {Model: "m-*", Pool: "b"}, {Model: "m-1", Pool: "b"}},
		Pools:  []PoolConfig{{Name: "a", Upstreams: []string{"http://a"}}, {Name: "b", Upstreams: []string{"http://b"}}},
	}
	g, _ := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	for model, want := range map[string]string{"m-1": "m-1", "m-2": "*", "x": "*"} {
		if r := s.route([]byte(model)); r == nil || r.Model != want {
			t.Errorf("route(%s) = %v, want %s", model, r, want)
		}
	}
}

func threeUpstreams(t *testing.T, pc PoolConfig) (*Gateway, *Snapshot, *Route, *clock.Fake) {
	pc.Name = "p"
	pc.Upstreams = []string{"http://a:1", "http://b:1", "http://c:1"}
	cfg := &Config{Routes: []RouteConfig{{Model: "m", Pool: "p"}}, Pools: []PoolConfig{pc}}
	g, clk := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	return g, s, s.Routes()[0], clk
}

func TestPickLeastOutstandingRoundRobin(t *testing.T) {
	_, s, r, _ := threeUpstreams(t, PoolConfig{})
	// Ties go round robin: three picks with nothing outstanding hit all three.
	seen := map[string]int{}
	for range 30 {
		u, rej := s.Pick(r, nil)
		if rej != nil {
			t.Fatal(rej)
		}
		seen[u.Name]++
	}
	if len(seen) != 3 || seen["a:1"] != 10 || seen["b:1"] != 10 || seen["c:1"] != 10 {
		t.Fatalf("tie-breaking not round robin: %v", seen)
	}
	// Load a with 2 and b with 1: c is chosen until it has 1, then b or c.
	ups := r.Pool.Upstreams
	var rel []func()
	acq := func(u *Upstream) {
		f, rej := u.Acquire(nil)
		if rej != nil {
			t.Fatal(rej)
		}
		rel = append(rel, f)
	}
	acq(ups[0])
	acq(ups[0])
	acq(ups[1])
	for range 5 {
		if u, _ := s.Pick(r, nil); u != ups[2] {
			t.Fatalf("picked %s, want the least loaded c", u.Name)
		}
	}
	acq(ups[2])
	for range 6 {
		if u, _ := s.Pick(r, nil); u == ups[0] {
			t.Fatal("picked the most loaded a")
		}
	}
	// except skips the failed upstream even when it is the least loaded.
	for _, f := range rel[:2] {
		f()
	}
	if u, _ := s.Pick(r, ups[0]); u == ups[0] {
		t.Fatal("except ignored")
	}
	for _, f := range rel[2:] {
		f()
	}
	for _, u := range ups {
		if u.Outstanding() != 0 || u.InFlight() != 0 {
			t.Fatalf("%s not drained: %d/%d", u.Name, u.Outstanding(), u.InFlight())
		}
	}
}

func TestPassiveEjection(t *testing.T) {
	g, s, r, clk := threeUpstreams(t, PoolConfig{Ejection: EjectionConfig{ConsecutiveFailures: 3, Duration: 10 * time.Second}})
	a := r.Pool.Upstreams[0]
	// Two failures, a success, two failures: never three in a row.
	for _, ok := range []bool{false, false, true, false, false} {
		g.Done(a, ok)
	}
	if a.Ejected() {
		t.Fatal("ejected without 3 consecutive failures")
	}
	g.Done(a, false)
	if !a.Ejected() {
		t.Fatal("not ejected after 3 consecutive failures")
	}
	for range 20 {
		if u, _ := s.Pick(r, nil); u == a {
			t.Fatal("picked an ejected upstream")
		}
	}
	// All ejected: 503 with Retry-After until the first comes back.
	clk.Advance(4 * time.Second)
	for _, u := range r.Pool.Upstreams[1:] {
		for range 3 {
			g.Done(u, false)
		}
	}
	_, rej := s.Pick(r, nil)
	if rej == nil || rej.Status != 503 || rej.Detail != endreason.DetailNoHealthy || rej.Reason.String() != "worker_failure" || rej.RetryAfter != 6 {
		t.Fatalf("all ejected: %+v", rej)
	}
	clk.Advance(6 * time.Second)
	if u, rej := s.Pick(r, nil); rej != nil || u != a {
		t.Fatalf("after the ejection: %v %+v", u, rej)
	}
}

func TestEjectionDisabled(t *testing.T) {
	g, _, r, _ := threeUpstreams(t, PoolConfig{Ejection: EjectionConfig{ConsecutiveFailures: -1}})
	for range 100 {
		g.Done(r.Pool.Upstreams[0], false)
	}
	if r.Pool.Upstreams[0].Ejected() {
		t.Fatal("ejected with ejection disabled")
	}
}

// scriptedProbe fails the URLs in down.
type scriptedProbe struct {
	mu   sync.Mutex
	down map[string]bool
}

func (p *scriptedProbe) probe(ctx context.Context, url string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down[url] {
		return errors.New("down")
	}
	return nil
}

func (p *scriptedProbe) set(url string, down bool) {
	p.mu.Lock()
	p.down[url] = down
	p.mu.Unlock()
}

// TestActiveHealthChecks: the verdict follows the last probe, and Pick
// follows the verdicts. The checkers' clock is stepped one interval at a
// time; each step ends when both checkers wait again, their probes done.
func TestActiveHealthChecks(t *testing.T) {
	const interval = time.Minute // on the fake clock
	pr := &scriptedProbe{down: map[string]bool{}}
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"},
			Health: HealthConfig{Path: "/health", Interval: interval, Timeout: time.Second}}},
	}
	g, clk := newGateway(t, cfg, Options{Probe: pr.probe})
	s := g.Snapshot()
	r := s.Routes()[0]
	a, b := r.Pool.Upstreams[0], r.Pool.Upstreams[1]
	pr.set("http://a:1/health", true)
	g.Start()
	clk.WaitArmed(2) // the first probes are done
	round := func() {
		clk.Advance(interval)
		clk.WaitArmed(2)
	}
	if a.Healthy() || !b.Healthy() {
		t.Fatalf("healthy: a %v b %v", a.Healthy(), b.Healthy())
	}
	for range 10 {
		if u, _ := s.Pick(r, nil); u != b {
			t.Fatal("picked the unhealthy upstream")
		}
	}
	pr.set("http://b:1/health", true)
	round()
	if _, rej := s.Pick(r, nil); rej == nil || rej.Detail != endreason.DetailNoHealthy || rej.RetryAfter != 1 {
		t.Fatalf("no healthy upstream: %+v", rej)
	}
	pr.set("http://a:1/health", false)
	round()
	if u, rej := s.Pick(r, nil); rej != nil || u != a {
		t.Fatalf("a recovered: %v %+v", u, rej)
	}
	g.Stop()
	// Stopped: no checker waits to probe again (goleak in TestMain checks
	// the goroutines).
	if n := clk.Armed(); n != 0 {
		t.Fatalf("%d checkers still waiting after Stop", n)
	}
}

// TestProbeTimeout: a probe that hangs is cut at the timeout and counts as
// a failure; Stop does not wait for it beyond that.
func TestProbeTimeout(t *testing.T) {
	probed := make(chan struct{}, 100)
	hang := func(ctx context.Context, url string) error {
		probed <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"},
			Health: HealthConfig{Path: "/h", Interval: 50 * time.Millisecond, Timeout: 5 * time.Millisecond}}},
	}
	g, clk := newGateway(t, cfg, Options{Probe: hang})
	g.Start()
	u := g.Snapshot().Pools()[0].Upstreams[0]
	clk.WaitArmed(1) // the checker waits to probe again: the probe is over
	<-probed
	if u.Healthy() {
		t.Fatal("a hanging probe did not make the upstream unhealthy")
	}
	g.Stop()
}
