package predict

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// overrunWindow is how many of an upstream's latest predicted requests
// Overrun reads: at about one a second, half a minute of them.
const overrunWindow = 32

// overrunKnown is how many an Overrun reads before it is Known.
const overrunKnown = 10

// Overrun is how far an upstream's first tokens come past their
// predictions: the 90th percentile of measured over predicted over the
// latest overrunWindow requests routed there with a prediction (the
// nearest rank: of fewer than ten, the largest), at least 1. A TTFT SLO
// is held to the prediction times it (Bound), so that a request admitted
// on its prediction meets its SLO about nine times in ten, and the tenth
// misses it by about the prediction's error, not by the error's tail.
// Observe takes a mutex; the others take no lock and allocate nothing.
// The zero Overrun is ready, with a factor of 1.
type Overrun struct {
	mu     sync.Mutex
	ratios [overrunWindow]float64 // measured over predicted, a ring
	n      int                    // observations taken
	factor atomic.Uint64          // float64 bits; 0: 1
	known  atomic.Bool            // n >= overrunKnown
}

// Observe takes one request's predicted and measured time to first token
// past routing; a request with either not above zero is ignored.
func (o *Overrun) Observe(predicted, measured time.Duration) {
	if predicted <= 0 || measured <= 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ratios[o.n%overrunWindow] = float64(measured) / float64(predicted)
	o.n++
	if o.n == overrunKnown {
		o.known.Store(true)
	}
	var sorted [overrunWindow]float64
	r := sorted[:min(o.n, overrunWindow)]
	copy(r, o.ratios[:])
	slices.Sort(r)
	p90 := r[(len(r)*9+9)/10-1] // the nearest rank
	o.factor.Store(math.Float64bits(max(p90, 1)))
}

// Factor is the 90th percentile of measured over predicted, at least 1;
// 1 until a request was observed.
func (o *Overrun) Factor() float64 {
	if f := o.factor.Load(); f != 0 {
		return math.Float64frombits(f)
	}
	return 1
}

// Known says o has read overrunKnown requests or more.
func (o *Overrun) Known() bool { return o.known.Load() }

// Bound is how long a first token predicted in total comes within about
// nine times in ten: total times Factor, or, while o is not Known, times
// prior if that is higher: the highest factor of the upstream's pool
// that is Known. An upstream few requests were routed to on their
// prediction is held to what its pool's others overrun, not to its
// few: held to those, it would be the surest of a pool whose others
// overrun theirs, and be sent the requests they are refused.
func (o *Overrun) Bound(total time.Duration, prior float64) time.Duration {
	f := o.Factor()
	if !o.Known() {
		f = max(f, prior)
	}
	return time.Duration(float64(total) * f)
}
