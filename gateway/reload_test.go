package gateway

import (
	"sync"
	"testing"
	"time"
)

func reloadConfig(upstreams []string, maxInFlight int, model string) *Config {
	return &Config{
		Keys:   []KeyConfig{{Name: "k", Key: HashKey("sk")}},
		Routes: []RouteConfig{{Model: model, Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: upstreams, MaxInFlight: maxInFlight,
			Health: HealthConfig{Path: "/h", Interval: time.Millisecond, Timeout: time.Millisecond / 2}}},
	}
}

// TestReload: requests in flight keep their snapshot and their releases
// work after their upstream left the config; an upstream that stays keeps
// its in-flight count and queue; a bad config changes nothing.
func TestReload(t *testing.T) {
	g, clk := newGateway(t, reloadConfig([]string{"http://a:1", "http://b:1"}, 1, "m1"), Options{})
	old := g.Snapshot()
	a, b := old.Pools()[0].Upstreams[0], old.Pools()[0].Upstreams[1]
	relA, _ := a.Acquire(nil)
	relB, _ := b.Acquire(nil)
	queued := acquireAsync(a, nil) // waits for a's slot across the reload
	clk.WaitArmed(1)               // its timer: it is queued
	g.Start()

	if err := g.Reload(reloadConfig([]string{"http://a:1", "http://c:1"}, 2, "m2")); err != nil {
		t.Fatal(err)
	}
	cur := g.Snapshot()
	if cur == old {
		t.Fatal("snapshot not swapped")
	}
	// The old snapshot still answers as before: its route, its key.
	if old.route([]byte("m1")) == nil || old.route([]byte("m2")) != nil {
		t.Fatal("old snapshot changed")
	}
	if cur.route([]byte("m2")) == nil || cur.route([]byte("m1")) != nil {
		t.Fatal("new snapshot lacks the new route")
	}
	ups := cur.Pools()[0].Upstreams
	if ups[0] != a {
		t.Fatal("a kept its URL but not its identity")
	}
	// a's raised limit (1 → 2) admits its waiter at once.
	w := <-queued
	if w.rej != nil || a.InFlight() != 2 {
		t.Fatalf("waiter after raised limit: %+v, in flight %d", w.rej, a.InFlight())
	}
	// b is gone from the config; its in-flight release still works.
	relB()
	if b.InFlight() != 0 || b.Outstanding() != 0 {
		t.Fatal("release on a removed upstream did nothing")
	}
	relA()
	w.release()
	if a.InFlight() != 0 {
		t.Fatal("a not drained")
	}
	// A bad config is refused and changes nothing.
	bad := reloadConfig(nil, 1, "m3")
	if err := g.Reload(bad); err == nil {
		t.Fatal("bad config accepted")
	}
	if g.Snapshot() != cur {
		t.Fatal("bad reload swapped the snapshot")
	}
	g.Stop()
}

// TestReloadLowersLimit: slots over a lowered limit are not handed on.
func TestReloadLowersLimit(t *testing.T) {
	g, clk := newGateway(t, reloadConfig([]string{"http://a:1"}, 3, "m"), Options{})
	a := g.Snapshot().Pools()[0].Upstreams[0]
	var rels []func()
	for range 3 {
		r, _ := a.Acquire(nil)
		rels = append(rels, r)
	}
	if err := g.Reload(reloadConfig([]string{"http://a:1"}, 1, "m")); err != nil {
		t.Fatal(err)
	}
	w := acquireAsync(a, nil)
	clk.WaitArmed(1) // it is queued
	rels[0]()
	rels[1]()
	if a.QueueDepth() != 1 || a.InFlight() != 1 {
		t.Fatalf("after two releases: %d queued, %d in flight; want 1, 1 (none admitted over the lowered limit)", a.QueueDepth(), a.InFlight())
	}
	rels[2]()
	got := <-w
	if got.rej != nil || a.InFlight() != 1 {
		t.Fatalf("%+v in flight %d", got.rej, a.InFlight())
	}
	got.release()
}

// TestReloadConcurrent: reloads racing with requests (run with -race).
func TestReloadConcurrent(t *testing.T) {
	g, _ := newGateway(t, reloadConfig([]string{"http://a:1", "http://b:1"}, 4, "m"), Options{})
	g.Start()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := g.Snapshot()
				k, rej := s.Authenticate([]byte("Bearer sk"))
				if rej != nil {
					t.Error(rej)
					return
				}
				res, _ := s.Admit(k, 10)
				r := s.route([]byte("m"))
				u, rej := s.Pick(r, nil)
				if rej != nil {
					res.Cancel()
					continue
				}
				rel, rej := u.Acquire(nil)
				if rej == nil {
					g.Done(u, true)
					rel()
				}
				res.Settle(7)
			}
		})
	}
	sets := [][]string{{"http://a:1", "http://b:1"}, {"http://b:1", "http://c:1"}, {"http://a:1"}}
	for i := range 50 {
		if err := g.Reload(reloadConfig(sets[i%3], 1+i%4, "m")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	g.Stop()
	for _, p := range g.Snapshot().Pools() {
		for _, u := range p.Upstreams {
			if u.InFlight() != 0 || u.Outstanding() != 0 {
				t.Fatalf("%s not drained", u.Name)
			}
		}
	}
}
