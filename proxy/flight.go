package proxy

import (
	"sync"
	"time"
)

// flight is what this proxy saw of one upstream's requests: how many it had
// in flight, how many of those were generating at once, and when each
// ended. From it a request's wait for one of the engine's slots is inferred
// where the engine does not report its queue (engines.InferQueue decides
// where; slotWait says how). The engine serves at most its capacity at a
// time: the most requests it has been seen generating at once lately (1
// until it has been seen doing more).
//
// Only this proxy's requests are seen: another client's, or another
// replica's, are not, and their waits stay unattributed.
type flight struct {
	mu         sync.Mutex
	inFlight   int    // sent, not ended
	generating int    // of those, past their first token
	ends       uint64 // requests ended so far
	// endAt holds end n's clock reading at n % flightEnds.
	endAt [flightEnds]int64
	// widest holds, for each of the last flightSamples first tokens, how
	// many requests were generating once it came (itself included).
	widest [flightSamples]uint16
	next   int // widest's next slot
}

const (
	// flightEnds bounds how far back ends are kept: a request during which
	// more than this many others ended gets no inferred wait.
	flightEnds = 512
	// flightSamples is how many first tokens the capacity is learned from:
	// the engine's capacity is the most seen generating at once in them,
	// so a wrong reading ages out.
	flightSamples = 64
	// flightSeen is how many of those must show a width for the capacity
	// to take it.
	flightSeen = 3
)

// flightTicket is one request's place in its upstream's flight. The zero
// ticket is in none.
type flightTicket struct {
	f     *flight // the flight it was sent in; nil: none
	ahead int     // requests in flight when it was sent
	ends0 uint64  // f.ends when it was sent
	endN  uint64  // its own end's number, once ended
	in    bool    // in flight: sent, not ended
	gen   bool    // past its first token, not ended
}

// begin puts t in f: the request is being sent.
func (f *flight) begin(t *flightTicket) {
	f.mu.Lock()
	*t = flightTicket{f: f, ahead: f.inFlight, ends0: f.ends, in: true}
	f.inFlight++
	f.mu.Unlock()
}

// cancel takes t out of its flight without an end: the request never
// reached the engine.
func (t *flightTicket) cancel() {
	if f := t.f; t.in {
		f.mu.Lock()
		f.inFlight--
		if t.gen {
			f.generating--
		}
		f.mu.Unlock()
	}
	*t = flightTicket{}
}

// firstToken says t's request is generating.
func (t *flightTicket) firstToken() {
	f := t.f
	if !t.in || t.gen {
		return
	}
	t.gen = true
	f.mu.Lock()
	f.generating++
	f.widest[f.next] = uint16(min(f.generating, 1<<16-1))
	f.next = (f.next + 1) % flightSamples
	f.mu.Unlock()
}

// end says t's request ended at clock reading at (the engine said it was
// done, or the response ended); once, later calls do nothing.
func (t *flightTicket) end(at int64) {
	f := t.f
	if !t.in {
		return
	}
	f.mu.Lock()
	f.inFlight--
	if t.gen {
		f.generating--
	}
	f.ends++
	f.endAt[f.ends%flightEnds] = at
	t.endN = f.ends
	f.mu.Unlock()
	t.in, t.gen = false, false
}

// capacity is the most requests seen generating at once lately, at least
// 1, counting only a width seen at flightSeen first tokens or more: a
// width seen once may be the proxy's own delay (an end it parsed after the
// next request's first token, the engine having sent them the other way
// round), while one the engine really has recurs. f.mu is held.
func (f *flight) capacity() int {
	c := 1
	for {
		seen := 0
		for _, w := range f.widest {
			if int(w) > c {
				seen++
			}
		}
		if seen < flightSeen {
			return c
		}
		c++
	}
}

// slotWait is how long t's request waited for an engine slot: from its
// send (clock reading sent) to the end that freed its slot, which came
// before its first token arrived (first). ok is false when nothing says it
// waited: fewer requests were ahead of it than the engine's capacity, the
// end it waited for is not known (not yet ended, or too far back), or that
// end came after its first token (the engine served it sooner: it can serve
// more at once than seen so far).
//
// With one slot, the end that freed it is the last one before its first
// token: the request that had the slot before it, whatever order the
// engine took the waiting requests in; unless another end came after its
// first token (one the engine served later, or an end the proxy read late,
// after the next first token had arrived), when none is known. With more, the engine is taken to
// serve them in the order they were sent: a request sent with k ahead, on
// c slots, got one when k-c+1 of those had ended.
func (t *flightTicket) slotWait(sent, first int64) (time.Duration, bool) {
	f := t.f
	if f == nil {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.capacity()
	if t.ahead < c || f.ends-t.ends0 > flightEnds {
		return 0, false
	}
	var at int64
	if c == 1 {
		for n := t.ends0 + 1; n <= f.ends; n++ {
			e := f.endAt[n%flightEnds]
			switch {
			case n == t.endN: // its own
			case e > first:
				// Another end after its first token on a one-slot engine:
				// the engine served that one later, or the proxy read its
				// end late; which end freed the slot is not known.
				return 0, false
			case e > at:
				at = e
			}
		}
	} else if n := t.ends0 + uint64(t.ahead-c+1); n <= f.ends {
		at = f.endAt[n%flightEnds]
	}
	if at > first || at <= sent {
		return 0, false
	}
	return time.Duration(at - sent), true
}
