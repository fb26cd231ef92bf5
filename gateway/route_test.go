package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
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

func threeUpstreams(t *testing.T, pc PoolConfig) (*Gateway, *Snapshot, *Route, *fakeClock) {
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

// scriptedProbe fails the URLs in down; every probe is counted.
type scriptedProbe struct {
	mu    sync.Mutex
	down  map[string]bool
	calls map[string]int
	cond  *sync.Cond
}

func newScriptedProbe() *scriptedProbe {
	p := &scriptedProbe{down: map[string]bool{}, calls: map[string]int{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *scriptedProbe) probe(ctx context.Context, url string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[url]++
	p.cond.Broadcast()
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

// waitCalls waits until url has been probed n more times than now.
func (p *scriptedProbe) waitCalls(t *testing.T, url string, n int) {
	t.Helper()
	p.mu.Lock()
	target := p.calls[url] + n
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		got := p.calls[url]
		p.mu.Unlock()
		if got >= target {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s probed %d times, want %d", url, got, target)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestActiveHealthChecks(t *testing.T) {
	pr := newScriptedProbe()
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"},
			Health: HealthConfig{Path: "/health", Interval: 5 * time.Millisecond, Timeout: 2 * time.Millisecond}}},
	}
	g, _ := newGateway(t, cfg, Options{Probe: pr.probe})
	s := g.Snapshot()
	r := s.Routes()[0]
	a, b := r.Pool.Upstreams[0], r.Pool.Upstreams[1]
	pr.set("http://a:1/health", true)
	g.Start()
	pr.waitCalls(t, "http://a:1/health", 2) // a full round after the change
	if a.Healthy() || !b.Healthy() {
		t.Fatalf("healthy: a %v b %v", a.Healthy(), b.Healthy())
	}
	for range 10 {
		if u, _ := s.Pick(r, nil); u != b {
			t.Fatal("picked the unhealthy upstream")
		}
	}
	pr.set("http://b:1/health", true)
	pr.waitCalls(t, "http://b:1/health", 2)
	if _, rej := s.Pick(r, nil); rej == nil || rej.Detail != endreason.DetailNoHealthy || rej.RetryAfter != 1 {
		t.Fatalf("no healthy upstream: %+v", rej)
	}
	pr.set("http://a:1/health", false)
	pr.waitCalls(t, "http://a:1/health", 2)
	if u, rej := s.Pick(r, nil); rej != nil || u != a {
		t.Fatalf("a recovered: %v %+v", u, rej)
	}
	g.Stop()
	// Stopped: no more probes (goleak in TestMain checks the goroutines).
	pr.mu.Lock()
	n := pr.calls["http://a:1/health"]
	pr.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.calls["http://a:1/health"] != n {
		t.Fatal("probes after Stop")
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
	g, _ := newGateway(t, cfg, Options{Probe: hang})
	g.Start()
	u := g.Snapshot().Pools()[0].Upstreams[0]
	deadline := time.Now().Add(5 * time.Second)
	for u.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("a hanging probe never made the upstream unhealthy")
		}
		time.Sleep(time.Millisecond)
	}
	<-probed
	g.Stop()
}
