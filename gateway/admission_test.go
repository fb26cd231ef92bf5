package gateway

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// queueUpstream is an upstream with the given limits on a gateway with
// opts (by default a fake clock, returned: each waiter arms one timer on it).
func queueUpstream(t testing.TB, opts Options, maxInFlight, size int, wait time.Duration) (*Upstream, *clock.Fake) {
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:  []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1"}, MaxInFlight: maxInFlight, QueueSize: size, QueueMaxWait: wait}},
	}
	g, clk := newGateway(t, cfg, opts)
	return g.Snapshot().Pools()[0].Upstreams[0], clk
}

// acquireAsync starts Acquire in a goroutine and returns its result channel.
type acquired struct {
	release func()
	rej     *Rejection
}

func acquireAsync(u *Upstream, cancel <-chan struct{}) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		r, rej := u.Acquire(cancel)
		ch <- acquired{r, rej}
	}()
	return ch
}

func TestAdmissionQueue(t *testing.T) {
	u, clk := queueUpstream(t, Options{}, 2, 2, time.Hour)
	r1, rej := u.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	r2, _ := u.Acquire(nil)
	if u.InFlight() != 2 || u.QueueDepth() != 0 {
		t.Fatalf("in flight %d depth %d", u.InFlight(), u.QueueDepth())
	}
	w1 := acquireAsync(u, nil)
	clk.WaitArmed(1) // w1 waits in the queue
	w2 := acquireAsync(u, nil)
	clk.WaitArmed(2)
	// Full: the third waiter is turned away at once.
	if _, rej := u.Acquire(nil); rej == nil || rej.Status != 503 || rej.Detail != endreason.DetailQueueFull || rej.RetryAfter != 1 ||
		rej.Reason.String() != "worker_failure" {
		t.Fatalf("full queue: %+v", rej)
	}
	if u.Outstanding() != 4 {
		t.Fatalf("outstanding %d, want 4", u.Outstanding())
	}
	r1() // the slot goes to w1, then w2
	a1 := <-w1
	if a1.rej != nil {
		t.Fatal(a1.rej)
	}
	if u.InFlight() != 2 || u.QueueDepth() != 1 {
		t.Fatalf("after handoff: in flight %d depth %d", u.InFlight(), u.QueueDepth())
	}
	r2()
	a2 := <-w2
	a1.release()
	a2.release()
	if u.InFlight() != 0 || u.Outstanding() != 0 || u.QueueDepth() != 0 {
		t.Fatalf("not drained: %d %d %d", u.InFlight(), u.Outstanding(), u.QueueDepth())
	}
}

// TestAdmissionTimeout: a waiter is turned away when its max wait is over,
// not before, and leaves nothing behind.
func TestAdmissionTimeout(t *testing.T) {
	const maxWait = 20 * time.Millisecond
	u, clk := queueUpstream(t, Options{}, 1, 10, maxWait)
	rel, _ := u.Acquire(nil)
	w := acquireAsync(u, nil)
	if d := clk.WaitArmed(1); d != maxWait {
		t.Fatalf("the waiter's timer fires in %v, want %v", d, maxWait)
	}
	clk.Advance(maxWait - time.Nanosecond)
	select {
	case a := <-w:
		t.Fatalf("turned away before its max wait: %+v", a.rej)
	default:
	}
	clk.Advance(time.Nanosecond)
	if a := <-w; a.rej == nil || a.rej.Status != 503 || a.rej.Detail != endreason.DetailQueueTimeout {
		t.Fatalf("timeout: %+v", a.rej)
	}
	if u.QueueDepth() != 0 || u.Outstanding() != 1 {
		t.Fatalf("timed-out waiter left behind: depth %d outstanding %d", u.QueueDepth(), u.Outstanding())
	}
	rel()
}

// TestAdmissionCancel: a waiter whose client leaves is removed from the
// middle of the queue; the ones around it keep their order.
func TestAdmissionCancel(t *testing.T) {
	u, clk := queueUpstream(t, Options{}, 1, 10, time.Hour)
	rel, _ := u.Acquire(nil)
	w1 := acquireAsync(u, nil)
	clk.WaitArmed(1)
	gone := make(chan struct{})
	w2 := acquireAsync(u, gone)
	clk.WaitArmed(2)
	w3 := acquireAsync(u, nil)
	clk.WaitArmed(3)
	close(gone)
	a2 := <-w2
	if a2.rej == nil || a2.rej.Status != 499 || a2.rej.Reason.String() != "client_cancel" {
		t.Fatalf("cancelled waiter: %+v", a2.rej)
	}
	if u.QueueDepth() != 2 {
		t.Fatalf("queue depth %d after the cancel, want 2", u.QueueDepth())
	}
	rel()
	a1 := <-w1
	if u.QueueDepth() != 1 {
		t.Fatal("w3 left the queue before w1 released its slot")
	}
	a1.release()
	a3 := <-w3
	if a3.rej != nil {
		t.Fatal(a3.rej)
	}
	a3.release()
	if u.InFlight() != 0 || u.Outstanding() != 0 {
		t.Fatalf("not drained: %d %d", u.InFlight(), u.Outstanding())
	}
}

// TestAdmissionFIFO1000: 1,000 waiters on a 1-slot queue are admitted in
// exactly the order they queued, each within its max wait.
func TestAdmissionFIFO1000(t *testing.T) {
	const n = 1000
	u, clk := queueUpstream(t, Options{}, 1, n, 30*time.Second)
	hold, _ := u.Acquire(nil)
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rel, rej := u.Acquire(nil)
			if rej != nil {
				t.Errorf("waiter %d: %+v", i, rej)
				return
			}
			order <- i
			rel()
		})
		clk.WaitArmed(i + 1) // queue them in a known order
	}
	start := time.Now()
	hold()
	wg.Wait()
	close(order)
	next := 0
	for i := range order {
		if i != next {
			t.Fatalf("admitted %d, want %d: not FIFO", i, next)
		}
		next++
	}
	if next != n {
		t.Fatalf("admitted %d of %d", next, n)
	}
	t.Logf("1000 handoffs in %v", time.Since(start))
	if u.InFlight() != 0 || u.Outstanding() != 0 || u.QueueDepth() != 0 {
		t.Fatal("not drained")
	}
}

// TestAdmissionBoundedWait: with 1,000 waiters and a max wait, every
// Acquire is turned away once the max wait is over, whatever the holder
// does.
func TestAdmissionBoundedWait(t *testing.T) {
	const n = 1000
	const maxWait = 50 * time.Millisecond
	u, clk := queueUpstream(t, Options{}, 1, n, maxWait)
	hold, _ := u.Acquire(nil) // never released in time
	var wg sync.WaitGroup
	var timeouts atomic.Int32
	for range n {
		wg.Go(func() {
			if _, rej := u.Acquire(nil); rej != nil && rej.Detail == endreason.DetailQueueTimeout {
				timeouts.Add(1)
			}
		})
	}
	clk.WaitArmed(n) // all queued
	clk.Advance(maxWait)
	wg.Wait()
	hold()
	if got := timeouts.Load(); got != n {
		t.Fatalf("%d timeouts, want %d", got, n)
	}
}

// TestAdmissionRaces: acquire, cancel, time out and release concurrently;
// the counts always return to zero and never exceed the limit.
func TestAdmissionRaces(t *testing.T) {
	const limit = 3
	u, _ := queueUpstream(t, Options{Clock: clock.Real}, limit, 50, 2*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	inUse, peak := 0, 0
	for i := range 400 {
		wg.Go(func() {
			cancel := make(chan struct{})
			if i%3 == 0 {
				time.AfterFunc(time.Duration(i%5)*time.Millisecond/2, func() { close(cancel) })
			}
			rel, rej := u.Acquire(cancel)
			if rej != nil {
				return
			}
			mu.Lock()
			inUse++
			peak = max(peak, inUse)
			mu.Unlock()
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			mu.Lock()
			inUse--
			mu.Unlock()
			rel()
		})
	}
	wg.Wait()
	if peak > limit {
		t.Fatalf("%d in flight at once, limit %d", peak, limit)
	}
	if u.InFlight() != 0 || u.Outstanding() != 0 || u.QueueDepth() != 0 {
		t.Fatalf("not drained: %d %d %d", u.InFlight(), u.Outstanding(), u.QueueDepth())
	}
}

func TestAdmissionUnlimited(t *testing.T) {
	u, _ := queueUpstream(t, Options{}, 0, 0, 0)
	var rels []func()
	for range 100 {
		r, rej := u.Acquire(nil)
		if rej != nil {
			t.Fatal(rej)
		}
		rels = append(rels, r)
	}
	if u.InFlight() != 100 {
		t.Fatalf("in flight %d", u.InFlight())
	}
	for _, r := range rels {
		r()
	}
	if u.InFlight() != 0 {
		t.Fatal("not drained")
	}
}
