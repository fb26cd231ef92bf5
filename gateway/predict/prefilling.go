package predict

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPrefilling is how many requests a Prefilling tracks; past it, a
// request is not tracked (the wait it would add is read from the others).
const MaxPrefilling = 64

// Prefilling is one upstream's requests that have been routed there and
// have no first token yet, each with when it was routed and when its first
// token is due (its routing plus its predicted TTFT past routing; its
// routing, for one routed without a prediction): the requests a new one
// routed there finds ahead of it in their prefill (Load.Ahead). Engines
// give the running prefills their step's token budget first, so a request
// routed behind one waits for it, which neither the backlog of predicted
// work nor the queue's lines, fitted over every busy request, see: in the
// routing benchmark's records, requests routed while another was in its
// prefill there waited 0.13 to 2.6 s at the median a run, and were
// predicted 0 to 0.9 s.
//
// Times are on the request clock's source, as Predict's now. Add and
// Remove take a lock; Wait, read at every prediction, takes none: it reads
// a summary they publish under a sequence count, as Model does. The zero
// value tracks nothing.
type Prefilling struct {
	// The summary first: Wait reads one cache line of it.
	seq                             atomic.Uint64 // odd while a writer publishes
	tracked, due, oldest, oldestDue atomic.Int64  // the summary: see publish

	mu   sync.Mutex
	n    int    // reqs in use, the first n
	last uint64 // the last id handed out
	reqs [MaxPrefilling]prefillingReq
}

// prefillingReq is one tracked request: its id (never 0), its routing and
// its first token due.
type prefillingReq struct {
	id          uint64
	routed, due time.Duration
}

// Add tracks a request routed at now whose first token is due at due; it
// returns the request's id for Remove (0: not tracked, MaxPrefilling are).
func (p *Prefilling) Add(now, due time.Duration) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == MaxPrefilling {
		return 0
	}
	p.last++
	p.reqs[p.n] = prefillingReq{id: p.last, routed: now, due: due}
	p.n++
	p.publish()
	return p.last
}

// Remove stops tracking request id (its first token came, or it ended
// without one); an id not tracked (0, or removed already) is ignored.
func (p *Prefilling) Remove(id uint64) {
	if id == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.n {
		if p.reqs[i].id == id {
			p.n--
			p.reqs[i] = p.reqs[p.n]
			p.publish()
			return
		}
	}
}

// publish sets the summary Wait reads: how many are tracked, the latest
// first token due, and the oldest request's routing and first token due.
// Called with mu held.
func (p *Prefilling) publish() {
	var due, oldest, oldestDue time.Duration
	for i, r := range p.reqs[:p.n] {
		due = max(due, r.due)
		if i == 0 || r.routed < oldest {
			oldest, oldestDue = r.routed, r.due
		}
	}
	p.seq.Add(1)
	p.tracked.Store(int64(p.n))
	p.due.Store(int64(due))
	p.oldest.Store(int64(oldest))
	p.oldestDue.Store(int64(oldestDue))
	p.seq.Add(1)
}

// Wait is, at now, how long a request routed now is predicted to wait for
// the tracked requests' prefills: until the latest of their first tokens
// due, or, once the oldest of them is past its due (a hit predicted that
// missed, a prefill slowed by others), as long again as it has taken so
// far, whichever is longer. (Replayed over the records of fourteen runs of
// the routing benchmark, the oldest stood for every overdue request: the
// longest wait over all of them gave the same error to a tenth of a point.)
func (p *Prefilling) Wait(now time.Duration) time.Duration {
	if p.tracked.Load() == 0 {
		return 0 // the common case of an idle upstream: one load
	}
	var tracked, due, oldest, oldestDue int64
	for try := 0; ; try++ {
		if try > 2 {
			runtime.Gosched() // a writer publishing was preempted
		}
		s := p.seq.Load()
		if s&1 != 0 {
			continue
		}
		tracked, due, oldest, oldestDue = p.tracked.Load(), p.due.Load(), p.oldest.Load(), p.oldestDue.Load()
		if p.seq.Load() == s {
			break
		}
	}
	if tracked == 0 {
		return 0
	}
	w := max(time.Duration(due)-now, 0)
	if time.Duration(oldestDue) <= now {
		w = max(w, now-time.Duration(oldest))
	}
	return w
}
