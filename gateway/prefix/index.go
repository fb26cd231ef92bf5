package prefix

import (
	"math/bits"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// DefaultCapacity is an Index's capacity when Options leave it 0: 100,000
// chain entries, ~5 MB (49 bytes each); at least 390 chains of
// MaxBlocks, and thousands of the usual shape, a long system prompt shared
// by many (its entries taken once) and a short question each.
const DefaultCapacity = 100_000

// ways is the entries of one set: its keys fill two cache lines, and a
// recently recorded entry is evicted only when 16 newer hashes land in its
// set first (with 8, an entry recorded again after a tenth of the
// capacity's worth of new hashes would be lost 3 times in 10,000).
const ways = 16

// Index maps chain hashes to the two upstreams that last served the prefix
// each names (Places), each with the mark the caller gave it then. It
// holds at most its capacity of entries, allocated whole by New: a
// set-associative cache, each hash's set chosen by its high bits, each set
// of 16 ways replacing its least recently recorded entry, so an entry stays while it is recorded again before 16 newer hashes land in
// its set: as in an LRU of the whole, while a good deal less than a
// capacity's worth of new hashes arrive in between (with a tenth of it,
// 1.6 a set on average, the odds of losing it are 2e-11). Each set has
// its own lock: a Record or Lookup holds one set's lock at a time, for a
// scan of its keys. Safe for concurrent use.
type Index struct {
	sets  []set
	clock clock.Clock
}

type set struct {
	mu     sync.Mutex
	keys   [ways]uint64 // 0: empty; the ways in use come first, never emptied
	at     [ways]time.Duration
	places [ways][Places]Place
	served [ways]uint8 // of places, the first served are filled
}

// Options configure an Index.
type Options struct {
	// Capacity is the most entries kept (0: DefaultCapacity), rounded up to
	// a multiple of 16.
	Capacity int
	// Clock dates each entry (nil: clock.Real).
	Clock clock.Clock
}

// Places is how many upstreams an entry keeps: the last two to serve its
// prefix. One would forget an engine's copy the moment another engine
// served the prefix, though the first engine still holds it: an engine
// routed away from for a while would then be known to hold nothing, and
// be sent nothing to find out otherwise. (put moves places as two.)
const Places = 2

// Place is an upstream that served a prefix, and the caller's mark then
// (the gateway's: how many tokens it had sent the upstream to compute, so
// that the tokens sent since say whether the engine's cache has had to
// evict the prefix).
type Place struct {
	Upstream uint32
	Mark     uint64
}

// Match is what Lookup found: the longest recorded prefix of a chain.
type Match struct {
	// Blocks is how many leading blocks of the chain matched (0: none);
	// with a chain cut at MaxBlocks, the engine may hold more than these.
	Blocks int
	// Places are the upstreams that last served the prefix of Blocks
	// blocks, the latest first; the first Served are filled (Served is 0
	// exactly when Blocks is).
	Places [Places]Place
	Served int
}

// Latest is the upstream that last served the match (0 when nothing
// matched).
func (m *Match) Latest() uint32 { return m.Places[0].Upstream }

// On is where m has upstream, when it has it.
func (m *Match) On(upstream uint32) (Place, bool) {
	for _, p := range m.Places[:m.Served] {
		if p.Upstream == upstream {
			return p, true
		}
	}
	return Place{}, false
}

// New returns an empty Index with all its memory.
func New(o Options) *Index {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return &Index{sets: make([]set, (o.Capacity+ways-1)/ways), clock: o.Clock}
}

// Capacity is the most entries x holds.
func (x *Index) Capacity() int { return len(x.sets) * ways }

// Record notes that upstream (an id of the caller's: one per upstream, not
// reused for another) served the prompt chain names, with mark, as chain's
// entries: each of its prefixes, dated now, upstream its latest place (the
// place it had, if any, moved there with the new mark; the other kept
// behind it). Record whole chains, so that every prefix of a recorded chain
// is recorded too: Lookup relies on it.
func (x *Index) Record(chain []uint64, upstream uint32, mark uint64) {
	now := x.clock.Now()
	for _, h := range chain {
		x.put(key(h), Place{upstream, mark}, now)
	}
}

// Lookup returns chain's longest prefix in x. Its binary search takes ≤ 9
// probes for a chain of MaxBlocks; an entry evicted from inside a recorded
// chain (sets evict apart) can only make it report a shorter match than
// there is, never one that is not there: a found hash names its whole
// prefix.
func (x *Index) Lookup(chain []uint64) Match {
	var m Match
	lo, hi := 0, len(chain)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if x.get(key(chain[mid-1]), &m) {
			lo, m.Blocks = mid, mid
		} else {
			hi = mid - 1
		}
	}
	return m
}

// Len counts the entries held, set by set: for tests and gauges, not for
// a request's path.
func (x *Index) Len() int {
	n := 0
	for i := range x.sets {
		s := &x.sets[i]
		s.mu.Lock()
		for _, k := range s.keys {
			if k != 0 {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// key is h as a key: 0 marks an empty way, so a hash of 0 is kept as 1.
func key(h uint64) uint64 { return max(h, 1) }

func (x *Index) set(k uint64) *set {
	i, _ := bits.Mul64(k, uint64(len(x.sets)))
	return &x.sets[i]
}

func (x *Index) put(k uint64, p Place, now time.Duration) {
	s := x.set(k)
	s.mu.Lock()
	victim := 0
	for i, sk := range s.keys {
		if sk == k || sk == 0 {
			victim = i
			break
		}
		if s.at[i] < s.at[victim] {
			victim = i
		}
	}
	ps, n := &s.places[victim], &s.served[victim]
	switch {
	case s.keys[victim] != k:
		*n = 1
	case ps[0].Upstream != p.Upstream:
		ps[1], *n = ps[0], Places
	}
	ps[0] = p
	s.keys[victim], s.at[victim] = k, now
	s.mu.Unlock()
}

// get fills m's places from k's entry, if there is one.
func (x *Index) get(k uint64, m *Match) bool {
	s := x.set(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, sk := range s.keys {
		if sk == k {
			m.Places, m.Served = s.places[i], int(s.served[i])
			return true
		}
		if sk == 0 {
			break
		}
	}
	return false
}
