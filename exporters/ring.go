package exporters

import (
	"slices"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// RingOptions sizes a Ring. The zero value gives the defaults.
type RingOptions struct {
	// Recent is how many of the latest records are kept (default 1000).
	// The aggregates are computed over them.
	Recent int
	// Slowest is how many of the slowest records are kept (default 100),
	// ranked by how long the client waited for its first token: TTFT, or
	// the whole duration for a request that got no first token.
	Slowest int
}

func (o *RingOptions) normalize() {
	if o.Recent <= 0 {
		o.Recent = 1000
	}
	if o.Slowest <= 0 {
		o.Slowest = 100
	}
}

// maxReasons bounds endreason.Reason values counted by the ring (the set
// has 8; the zero value and anything unknown count as index 0).
const maxReasons = 16

// Ring is a record.Sink that keeps copies (record.Record.CopyTo) of the most
// recent records and of the slowest ones since start, for the page and
// the /debug/requests endpoints.
//
// Emit derives the record's stages outside the lock, then takes one mutex
// for a struct copy into a fixed slot and, when the record is among the
// slowest, a heap update over Slowest entries (O(log n)). It allocates nothing and
// never drops. Readers (Recent, Slowest, Lookup, Stats) copy out under the
// same mutex. A Ring is safe for concurrent use; the zero value is not
// usable, use NewRing.
type Ring struct {
	mu      sync.Mutex
	recent  []kept // fixed length; recent[next-1] is the newest
	next    int
	filled  int
	slow    []kept     // fixed length; slots of the slowest heap
	heap    []slowItem // min-heap on key: heap[0] is the least slow kept
	total   uint64
	reasons [maxReasons]uint64 // since start
}

type slowItem struct {
	key  time.Duration
	seq  uint64 // tie-break: the earlier record is less slow
	slot int32
}

func (a slowItem) less(b slowItem) bool {
	return a.key < b.key || a.key == b.key && a.seq < b.seq
}

// NewRing returns an empty ring.
func NewRing(opts RingOptions) *Ring {
	opts.normalize()
	return &Ring{
		recent: make([]kept, opts.Recent),
		slow:   make([]kept, opts.Slowest),
		heap:   make([]slowItem, 0, opts.Slowest),
	}
}

// Emit keeps a copy of r. It does not keep r and sorts r's inter-token
// gaps in place (stages.Stream.Gaps).
func (g *Ring) Emit(r *record.Record) {
	bd := r.Breakdown()
	r.Stream.Gaps() // derived outside the lock; the copy is made in place
	g.mu.Lock()
	defer g.mu.Unlock()
	k := &g.recent[g.next]
	k.set(r, bd)
	key := k.waitedFirst()
	g.total++
	g.reasons[reasonIndex(k.r.Reason)]++
	g.next++
	if g.next == len(g.recent) {
		g.next = 0
	}
	g.filled = min(g.filled+1, len(g.recent))

	it := slowItem{key: key, seq: g.total}
	switch {
	case len(g.heap) < len(g.slow):
		it.slot = int32(len(g.heap))
		g.slow[it.slot] = *k
		g.heap = append(g.heap, it)
		g.up(len(g.heap) - 1)
	case g.heap[0].less(it):
		it.slot = g.heap[0].slot
		g.slow[it.slot] = *k
		g.heap[0] = it
		g.down(0)
	}
}

func (g *Ring) up(i int) {
	h := g.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (g *Ring) down(i int) {
	h := g.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			c = r
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

func reasonIndex(r endreason.Reason) int {
	if int(r) < maxReasons {
		return int(r)
	}
	return 0
}

// Total is the number of records emitted since start.
func (g *Ring) Total() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// Recent appends up to limit of the most recent records to dst, newest
// first (limit <= 0: all kept).
func (g *Ring) Recent(dst []record.Record, limit int) []record.Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.filled
	if limit > 0 {
		n = min(n, limit)
	}
	for i := range n {
		j := g.next - 1 - i
		if j < 0 {
			j += len(g.recent)
		}
		dst = append(dst, g.recent[j].r)
	}
	return dst
}

// Slowest appends up to limit of the slowest records since start to dst,
// slowest first (by the wait for the first token; limit <= 0: all kept).
func (g *Ring) Slowest(dst []record.Record, limit int) []record.Record {
	g.mu.Lock()
	items := slices.Clone(g.heap)
	slices.SortFunc(items, func(a, b slowItem) int {
		if b.less(a) {
			return -1
		}
		if a.less(b) {
			return 1
		}
		return 0
	})
	if limit > 0 && len(items) > limit {
		items = items[:limit]
	}
	for _, it := range items {
		dst = append(dst, g.slow[it.slot].r)
	}
	g.mu.Unlock()
	return dst
}

// Lookup returns the newest kept record with the request id, among the
// recent and the slowest ones.
func (g *Ring) Lookup(id string) (record.Record, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.filled {
		j := g.next - 1 - i
		if j < 0 {
			j += len(g.recent)
		}
		if g.recent[j].r.RequestID == id {
			return g.recent[j].r, true
		}
	}
	best := -1
	for i, it := range g.heap {
		if g.slow[it.slot].r.RequestID == id && (best < 0 || it.seq > g.heap[best].seq) {
			best = i
		}
	}
	if best >= 0 {
		return g.slow[g.heap[best].slot].r, true
	}
	return record.Record{}, false
}

// Percentiles are nearest-rank percentiles of a set of durations.
type Percentiles struct {
	P50, P95 time.Duration
}

// RingStats aggregates the recent window.
type RingStats struct {
	// Window is the number of records in the window; FirstToken is how
	// many of them got a first token (the stage percentiles are over
	// those).
	Window, FirstToken int
	// Stages are each stage's own p50 and p95. Their sum is not the TTFT
	// percentile: a slow request's stages need not be slow together.
	Stages [stages.NumStages]Percentiles
	TTFT   Percentiles
	E2E    Percentiles // over the whole window
	// Reasons counts the window's records by end reason, ReasonsTotal
	// every record since start; both indexed by endreason.Reason.
	Reasons, ReasonsTotal [maxReasons]uint64
	Total                 uint64
}

// Stats computes the aggregates of the recent window. It costs a sort of
// each stage over the window (about 100 µs for 1000 records) and holds the
// ring's mutex only while copying the values out.
func (g *Ring) Stats() RingStats {
	var st RingStats
	var vals [stages.NumStages + 2][]time.Duration
	g.mu.Lock()
	n := g.filled
	for i := range vals {
		vals[i] = make([]time.Duration, 0, n)
	}
	for i := range n {
		k := &g.recent[i]
		st.Reasons[reasonIndex(k.r.Reason)]++
		vals[stages.NumStages+1] = append(vals[stages.NumStages+1], k.r.E2E())
		if !k.bd.OK {
			continue
		}
		for s, d := range k.bd.Stages {
			vals[s] = append(vals[s], d)
		}
		vals[stages.NumStages] = append(vals[stages.NumStages], k.bd.TTFT)
	}
	st.ReasonsTotal = g.reasons
	st.Total = g.total
	g.mu.Unlock()

	st.Window, st.FirstToken = n, len(vals[0])
	for k := range stages.NumStages {
		st.Stages[k] = percentiles(vals[k])
	}
	st.TTFT = percentiles(vals[stages.NumStages])
	st.E2E = percentiles(vals[stages.NumStages+1])
	return st
}

// percentiles sorts v in place and returns its nearest-rank p50 and p95
// (zero for an empty set).
func percentiles(v []time.Duration) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	slices.Sort(v)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(v))+0.999999) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	return Percentiles{P50: rank(0.50), P95: rank(0.95)}
}
