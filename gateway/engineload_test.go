package gateway

import (
	"slices"
	"testing"
)

func leastLoadPool(t *testing.T, opts Options, upstreams ...string) (*Gateway, *Snapshot, *Route) {
	t.Helper()
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:  []PoolConfig{{Name: "p", Upstreams: upstreams, Policy: PolicyLeastLoad}},
	}
	g, _ := newGateway(t, cfg, opts)
	s := g.Snapshot()
	return g, s, s.Routes()[0]
}

// load is an engine report in a table: known false leaves the load unknown.
type load struct {
	known            bool
	waiting, running int64
	kv               float64
}

func (l load) set(u *Upstream) {
	if l.known {
		u.SetEngineLoad(EngineLoad{Waiting: l.waiting, Running: l.running, KVCacheUsage: l.kv}, u.ScrapeMark())
	} else {
		u.ClearEngineLoad()
	}
}

// TestPickLeastLoadOrder: waiting first, then running, then KV-cache usage
// (in whole percent, and only when both report it); ties round robin; an
// unknown load anywhere falls back to the fewest outstanding requests.
func TestPickLeastLoadOrder(t *testing.T) {
	tests := []struct {
		name  string
		a, b  load
		busyA int      // requests this replica holds on a (outstanding)
		want  []string // the upstreams of successive picks
	}{
		{"fewer waiting wins over fewer running", load{true, 3, 0, 0}, load{true, 1, 9, 0.9}, 0, []string{"b:1", "b:1"}},
		{"then fewer running", load{true, 2, 4, 0}, load{true, 2, 3, 0.9}, 0, []string{"b:1", "b:1"}},
		{"then less KV cache", load{true, 0, 2, 0.50}, load{true, 0, 2, 0.20}, 0, []string{"b:1", "b:1"}},
		{"KV within a percent is a tie", load{true, 0, 2, 0.201}, load{true, 0, 2, 0.205}, 0, []string{"a:1", "b:1", "a:1", "b:1"}},
		{"KV reported by one only is a tie", load{true, 0, 2, -1}, load{true, 0, 2, 0.3}, 0, []string{"a:1", "b:1", "a:1", "b:1"}},
		{"equal loads round robin", load{true, 1, 1, 0.1}, load{true, 1, 1, 0.1}, 0, []string{"a:1", "b:1", "a:1", "b:1"}},
		{"our requests since the scrape count as waiting", load{true, 0, 0, 0}, load{true, 1, 0, 0}, 2, []string{"b:1", "b:1"}},
		{"unknown load: fewest outstanding", load{false, 0, 0, 0}, load{true, 0, 0, 0}, 1, []string{"b:1", "b:1"}},
		{"unknown load: the engines' loads are not used", load{true, 9, 9, 0}, load{false, 0, 0, 0}, 0, []string{"a:1", "b:1", "a:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, s, r := leastLoadPool(t, Options{}, "http://a:1", "http://b:1")
			a, b := r.Pool.Upstreams[0], r.Pool.Upstreams[1]
			tt.a.set(a)
			tt.b.set(b)
			for range tt.busyA {
				release, rej := a.Acquire(nil)
				if rej != nil {
					t.Fatal(rej)
				}
				defer release()
			}
			r.Pool.rr.Store(1) // the next pick's rotation starts at a
			var got []string
			for range tt.want {
				u, rej := s.Pick(r, nil)
				if rej != nil {
					t.Fatal(rej)
				}
				got = append(got, u.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("picks %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLeastLoadBlend: a burst between two scrapes spreads. Both engines
// report the same load; each request this replica sends counts on its
// engine until the next scrape, so successive picks alternate instead of
// all going to the first. Requests that ended since the scrape come off:
// first off waiting, then off running.
func TestLeastLoadBlend(t *testing.T) {
	_, s, r := leastLoadPool(t, Options{}, "http://a:1", "http://b:1", "http://c:1")
	ups := r.Pool.Upstreams
	for i, u := range ups {
		u.SetEngineLoad(EngineLoad{Waiting: 0, Running: int64(i), KVCacheUsage: -1}, u.ScrapeMark())
	}
	// a runs 0, b 1, c 2: a burst of six takes a, then a or b, ...: no
	// engine ends with more than one waiting above another.
	counts := map[*Upstream]int{}
	var releases []func()
	for range 6 {
		u, release := pickAndAcquire(t, s, r)
		releases = append(releases, release)
		counts[u]++
	}
	if counts[ups[0]] != 2 || counts[ups[1]] != 2 || counts[ups[2]] != 2 {
		t.Fatalf("burst of 6 spread a %d, b %d, c %d; want 2 each", counts[ups[0]], counts[ups[1]], counts[ups[2]])
	}

	// A new scrape of a sees our two as running; then they end: a's load
	// goes down by two, off waiting first.
	a := ups[0]
	a.SetEngineLoad(EngineLoad{Waiting: 1, Running: 2, KVCacheUsage: -1}, a.ScrapeMark())
	if k, _ := a.loadKey(); k != (loadKey{1, 2, -1}) {
		t.Fatalf("just scraped: %+v", k)
	}
	for _, release := range releases {
		release()
	}
	if k, _ := a.loadKey(); k != (loadKey{0, 1, -1}) {
		t.Fatalf("two of ours ended since the scrape: %+v, want waiting 0, running 1", k)
	}
}

// TestLeastLoadFallbackLogged: an unknown load is logged once when
// least_load starts falling back and once when every load is known again;
// picks in between log nothing.
func TestLeastLoadFallbackLogged(t *testing.T) {
	lines, log := captureLog()
	_, s, r := leastLoadPool(t, Options{Log: log}, "http://a:1", "http://b:1")
	a, b := r.Pool.Upstreams[0], r.Pool.Upstreams[1]
	b.SetEngineLoad(EngineLoad{KVCacheUsage: -1}, 0)
	for range 3 {
		if _, rej := s.Pick(r, nil); rej != nil {
			t.Fatal(rej)
		}
	}
	a.SetEngineLoad(EngineLoad{Waiting: 5, KVCacheUsage: -1}, 0)
	for range 3 {
		if u, _ := s.Pick(r, nil); u != b {
			t.Fatalf("picked %s, want b (a has 5 waiting)", u.Name)
		}
	}
	wantLines(t, lines.Take(t),
		map[string]any{"level": "warn", "pool": "p", "upstream": "a:1", "message": "~the engine's load is unknown"},
		map[string]any{"level": "info", "pool": "p", "message": "~every engine's load is known again"})
}

// TestPolicyReload: a reload switches a pool's policy; the upstreams keep
// their scraped load.
func TestPolicyReload(t *testing.T) {
	cfg := func(policy string) *Config {
		return &Config{
			Routes: []RouteConfig{{Model: "m", Pool: "p"}},
			Pools:  []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"}, Policy: policy}},
		}
	}
	g, _ := newGateway(t, cfg(""), Options{})
	if p := g.Snapshot().Pools()[0]; p.Policy != PolicyLeastRequest {
		t.Fatalf("default policy %q", p.Policy)
	}
	a := g.Snapshot().Pools()[0].Upstreams[0]
	b := g.Snapshot().Pools()[0].Upstreams[1]
	a.SetEngineLoad(EngineLoad{Waiting: 4, KVCacheUsage: -1}, 0)
	b.SetEngineLoad(EngineLoad{KVCacheUsage: -1}, 0)
	var seen []*Snapshot
	g.Watch(func(s *Snapshot) { seen = append(seen, s) })
	if err := g.Reload(cfg(PolicyLeastLoad)); err != nil {
		t.Fatal(err)
	}
	s := g.Snapshot()
	if len(seen) != 2 || seen[1] != s {
		t.Fatalf("Watch saw %d snapshots, want the first and the reloaded one", len(seen))
	}
	for range 4 {
		if u, _ := s.Pick(s.Routes()[0], nil); u != b {
			t.Fatalf("least_load after the reload picked %s, want b", u.Name)
		}
	}
}

// pickAndAcquire picks an upstream of r and takes a request slot on it, as
// the proxy does for a request.
func pickAndAcquire(t testing.TB, s *Snapshot, r *Route) (*Upstream, func()) {
	t.Helper()
	u, rej := s.Pick(r, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	release, rej := u.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	return u, release
}
