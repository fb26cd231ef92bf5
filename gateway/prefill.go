package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// Waiting for a prompt's prefill (docs/routing.md, "Waiting for a
// prefill"). An engine caches a prompt only once it has computed it (the
// reference engine and SGLang's radix cache when the prefill ends, vLLM
// block by block as each is filled), so a request of the same prompt that
// reaches it meanwhile computes the prompt again beside the first: the
// two share the engine's compute, and the second copy takes room in the
// cache. In a least_ttft pool a request sent to compute a prompt likely
// to come again leads it (Commit) until its first token (PrefillDone); a
// request of the prompt routed meanwhile to the same upstream, as a hit
// there, follows: it waits for that first token (AwaitPrefill), holding
// its admission slot, and finds the prompt cached. Its prediction counts
// the wait in its queue.

// prefillSlots is how many leaders an upstream tracks at once; a leader
// past them takes the place of the one predicted to be done first, whose
// followers go on at once.
const prefillSlots = 8

// prefills is one upstream's leaders. used (the slots in use) lets Choose
// skip the mutex while there are none.
type prefills struct {
	used  atomic.Int32
	mu    sync.Mutex
	last  uint64 // the last leader's ticket
	slots [prefillSlots]prefill
}

// prefill is one leader: the prompt it computes (key, the hash of the
// prompt's first message; 0: a free slot), its ticket, when its first
// token is predicted (until, on the gateway's clock) and its predicted
// TTFT (span), and its followers.
type prefill struct {
	key, ticket uint64
	until, span int64
	head        *waiter
}

// lead makes a request of the prompt key, whose first token is predicted
// span after now, a leader, and returns its ticket for done.
func (pf *prefills) lead(key uint64, now int64, span time.Duration) uint64 {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	i := 0
	for j := range pf.slots {
		if pf.slots[j].key == 0 {
			i = j
			break
		}
		if pf.slots[j].until < pf.slots[i].until {
			i = j
		}
	}
	if s := &pf.slots[i]; s.key != 0 {
		pf.free(s)
	}
	pf.last++
	pf.slots[i] = prefill{key: key, ticket: pf.last, until: now + int64(span), span: int64(span)}
	pf.used.Add(1)
	return pf.last
}

// done ends the leader of ticket: its followers go on. A ticket already
// done (or replaced) does nothing.
func (pf *prefills) done(ticket uint64) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	for i := range pf.slots {
		if s := &pf.slots[i]; s.key != 0 && s.ticket == ticket {
			pf.free(s)
			return
		}
	}
}

// free grants s's followers and frees s. pf.mu is held.
func (pf *prefills) free(s *prefill) {
	for w := s.head; w != nil; {
		next := w.next
		w.prev, w.next = nil, nil
		w.granted = true
		w.ready <- struct{}{}
		w = next
	}
	*s = prefill{}
	pf.used.Add(-1)
}

// wait says whether the prompt key has a leader, and how long a request of
// it routed at now is predicted to wait for the leader's first token (0
// once that is late).
func (pf *prefills) wait(key uint64, now int64) (time.Duration, bool) {
	if pf.used.Load() == 0 {
		return 0, false
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	for i := range pf.slots {
		if s := &pf.slots[i]; s.key == key {
			return time.Duration(max(s.until-now, 0)), true
		}
	}
	return 0, false
}

// AwaitPrefill waits, for a request Choose routed to u as c, for the first
// token of the leader it follows (c.Follow), at most until that first
// token's predicted time and as long again; it returns at once when c
// follows none or its leader is done. cancel (nil: never) closing means
// the client left: it returns false at once.
func (u *Upstream) AwaitPrefill(c *Choice, cancel <-chan struct{}) bool {
	if c.Follow == 0 {
		return true
	}
	pf := &u.prefills
	pf.mu.Lock()
	var s *prefill
	for i := range pf.slots {
		if pf.slots[i].key == c.Follow {
			s = &pf.slots[i]
		}
	}
	if s == nil {
		pf.mu.Unlock()
		return true
	}
	w := u.g.waiters.Get().(*waiter)
	w.next = s.head
	if s.head != nil {
		s.head.prev = w
	}
	s.head = w
	limit := time.Duration(max(s.until-u.g.now(), 0) + s.span)
	pf.mu.Unlock()

	w.timer.Reset(limit)
	cancelled := false
	select {
	case <-w.ready:
		u.putWaiter(w)
		return true
	case <-cancel:
		cancelled = true
	case <-w.timeout:
	}
	pf.mu.Lock()
	if w.granted { // the leader was done as this one gave up
		pf.mu.Unlock()
		<-w.ready
	} else { // still s's: a slot is freed only by granting its followers
		if w.prev != nil {
			w.prev.next = w.next
		} else {
			s.head = w.next
		}
		if w.next != nil {
			w.next.prev = w.prev
		}
		w.prev, w.next = nil, nil
		pf.mu.Unlock()
	}
	u.putWaiter(w)
	return !cancelled
}

// PrefillDone ends the lead of a request Choose routed to u as c
// (c.Lead): its first token came, or it ended without one. Call it at
// either; once done, it does nothing.
func (u *Upstream) PrefillDone(c *Choice) {
	if c.Lead != 0 {
		u.prefills.done(c.Lead)
	}
}
