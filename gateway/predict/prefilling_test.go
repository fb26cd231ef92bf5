package predict

import (
	"testing"
	"time"
)

// TestPrefillingWait: a request routed behind requests without a first
// token waits until the latest of them is due; once the oldest is past
// its due, as long again as it has taken; nothing once they are removed.
// Past MaxPrefilling a request is not tracked; an unknown id removes
// nothing.
func TestPrefillingWait(t *testing.T) {
	const ms = time.Millisecond
	var p Prefilling
	if w := p.Wait(0); w != 0 {
		t.Fatalf("none tracked: wait %v", w)
	}
	a := p.Add(0, 100*ms)     // routed at 0, due at 100 ms
	b := p.Add(10*ms, 300*ms) // routed at 10 ms, due at 300 ms
	for _, tc := range []struct {
		now, want time.Duration
	}{
		{50 * ms, 250 * ms},  // until b is due
		{250 * ms, 250 * ms}, // a is 150 ms past its due: it has taken 250 ms, so 250 more (b's 50 ms are less)
		{400 * ms, 400 * ms}, // both past due: a, the oldest, has taken 400 ms
	} {
		if got := p.Wait(tc.now); got != tc.want {
			t.Errorf("at %v: wait %v, want %v", tc.now, got, tc.want)
		}
	}
	p.Remove(a)
	if got, want := p.Wait(50*ms), 250*ms; got != want {
		t.Errorf("a removed, at 50 ms: wait %v, want %v (b's)", got, want)
	}
	p.Remove(a) // again: nothing
	p.Remove(0)
	p.Remove(b)
	if got := p.Wait(50 * ms); got != 0 {
		t.Errorf("both removed: wait %v, want 0", got)
	}
	ids := map[uint64]bool{}
	for i := range MaxPrefilling {
		id := p.Add(time.Duration(i), time.Duration(i))
		if id == 0 || ids[id] {
			t.Fatalf("request %d: id %d (seen %v)", i, id, ids[id])
		}
		ids[id] = true
	}
	if id := p.Add(0, 0); id != 0 {
		t.Fatalf("past MaxPrefilling: id %d, want 0 (not tracked)", id)
	}
}

// TestAheadQueue: the queue is predicted at least as long as the wait for
// the requests ahead in their prefill.
func TestAheadQueue(t *testing.T) {
	m := New(Config{})
	m.Observe(Observation{FirstToken: true, PromptTokens: 1000, Parts: Parts{Queue: time.Millisecond, Prefill: 100 * time.Millisecond}})
	for _, ahead := range []time.Duration{0, 500 * time.Millisecond} {
		p, ok := m.Predict(0, 1000, Expected{}, Load{InFlight: 1, Ahead: ahead})
		if !ok || p.Parts[Queue] < ahead || ahead == 0 && p.Parts[Queue] > 10*time.Millisecond {
			t.Errorf("ahead %v: queue %v (ok %v)", ahead, p.Parts[Queue], ok)
		}
	}
}
