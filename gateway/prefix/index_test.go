package prefix

import (
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// chainOf is a chain of n made-up hashes, family f's: chains of one family
// share their prefixes, chains of two families nothing.
func chainOf(f uint64, n int) []uint64 {
	c := make([]uint64, n)
	prev := Hash([]byte{byte(f), byte(f >> 8), byte(f >> 16), byte(f >> 24), byte(f >> 32)})
	for i := range c {
		prev = avalanche(prev + uint64(i))
		c[i] = prev
	}
	return c
}

// TestLookup: the longest recorded prefix, and the last two upstreams to
// serve it with their marks, the latest first.
func TestLookup(t *testing.T) {
	type record struct {
		chain    []uint64
		upstream uint32
		mark     uint64
	}
	long := chainOf(1, 100)
	one := func(blocks int, up uint32, mark uint64) Match {
		return Match{Blocks: blocks, Places: [Places]Place{{up, mark}}, Served: 1}
	}
	two := func(blocks int, a, b Place) Match {
		return Match{Blocks: blocks, Places: [Places]Place{a, b}, Served: 2}
	}
	for _, tc := range []struct {
		name    string
		records []record
		query   []uint64
		want    Match
	}{
		{"nothing recorded", nil, long, Match{}},
		{"empty chain", []record{{long, 1, 0}}, nil, Match{}},
		{"the whole chain", []record{{long, 3, 70}}, long, one(100, 3, 70)},
		{"a longer chain than recorded", []record{{long[:40], 2, 0}}, long, one(40, 2, 0)},
		{"a shorter chain than recorded", []record{{long, 2, 0}}, long[:7], one(7, 2, 0)},
		{"one block", []record{{long[:1], 5, 0}}, long, one(1, 5, 0)},
		{"diverging after a shared prefix", []record{{long[:30], 4, 0}}, append(long[:10:10], chainOf(2, 50)...), one(10, 4, 0)},
		{"another family", []record{{long, 1, 0}}, chainOf(3, 100), Match{}},
		{"the same upstream again: its new mark", []record{{long, 1, 10}, {long, 1, 20}}, long, one(100, 1, 20)},
		{"two upstreams, the latest first", []record{{long[:50], 1, 10}, {long[:20], 2, 5}}, long[:20], two(20, Place{2, 5}, Place{1, 10})},
		{"the longest, not the latest", []record{{long[:50], 1, 10}, {long[:20], 2, 5}}, long, one(50, 1, 10)},
		{"a third upstream: the oldest goes", []record{{long, 1, 10}, {long, 2, 5}, {long, 3, 7}}, long, two(100, Place{3, 7}, Place{2, 5})},
		{"the earlier upstream again: to the front", []record{{long, 1, 10}, {long, 2, 5}, {long, 1, 30}}, long, two(100, Place{1, 30}, Place{2, 5})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := New(Options{Capacity: 4096})
			for _, r := range tc.records {
				x.Record(r.chain, r.upstream, r.mark)
			}
			if got := x.Lookup(tc.query); got != tc.want {
				t.Errorf("Lookup = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMatchOn: where a match has an upstream.
func TestMatchOn(t *testing.T) {
	m := Match{Blocks: 3, Places: [Places]Place{{7, 100}, {0, 40}}, Served: 2}
	for _, tc := range []struct {
		up   uint32
		want Place
		ok   bool
	}{{7, Place{7, 100}, true}, {0, Place{0, 40}, true}, {5, Place{}, false}} {
		if got, ok := m.On(tc.up); got != tc.want || ok != tc.ok {
			t.Errorf("On(%d) = %+v, %v; want %+v, %v", tc.up, got, ok, tc.want, tc.ok)
		}
	}
	one := Match{Blocks: 3, Places: [Places]Place{{7, 100}}, Served: 1}
	if _, ok := one.On(0); ok {
		t.Error("a match served once has an upstream 0 in its empty place")
	}
}

// TestLookupZeroHash: a hash of 0 is kept, not taken for an empty way.
func TestLookupZeroHash(t *testing.T) {
	x := New(Options{Capacity: 8})
	x.Record([]uint64{0}, 9, 0)
	if m := x.Lookup([]uint64{0}); m.Blocks != 1 || m.Latest() != 9 {
		t.Errorf("Lookup of hash 0 = %+v", m)
	}
}

// TestFlood: under a flood of unique prompts the index holds its capacity
// and no more, the oldest entries go, and a prefix recorded again and
// again (a shared system prompt) stays.
func TestFlood(t *testing.T) {
	var clk clock.Fake
	x := New(Options{Capacity: 1000, Clock: &clk})
	if x.Capacity() != 1008 {
		t.Fatalf("capacity %d, want 1000 rounded up to sets of 16, 1008", x.Capacity())
	}
	hot := chainOf(0, 20)
	const unique, chainLen = 10_000, 16 // 160 times the capacity
	first := chainOf(1, chainLen)
	for f := range uint64(unique) {
		clk.Advance(time.Millisecond)
		x.Record(chainOf(f+1, chainLen), 1, 0)
		if f%10 == 0 { // 160 new entries between two uses of hot
			x.Record(hot, 2, 0)
		}
	}
	if n := x.Len(); n != x.Capacity() {
		t.Errorf("%d entries after the flood, want the capacity, %d", n, x.Capacity())
	}
	if m := x.Lookup(first); m.Blocks != 0 {
		t.Errorf("the flood's first chain is still there: %+v", m)
	}
	if m := x.Lookup(hot); m.Blocks != len(hot) || m.Latest() != 2 {
		t.Errorf("the hot chain: %+v, want all %d blocks on upstream 2", m, len(hot))
	}
	last := chainOf(unique, chainLen)
	if m := x.Lookup(last); m.Blocks != chainLen {
		t.Errorf("the flood's last chain: %+v, want all %d blocks", m, chainLen)
	}
}

// TestConcurrent: records and lookups from many goroutines (run with
// -race); a lookup finds only what was recorded for that chain.
func TestConcurrent(t *testing.T) {
	x := New(Options{Capacity: 512})
	shared := chainOf(0, 32)
	var wg sync.WaitGroup
	for g := range uint32(4) {
		wg.Go(func() {
			for i := range 500 {
				own := chainOf(uint64(g)<<20|uint64(i%50+1), 24)
				x.Record(own, g, 0)
				x.Record(shared, g, 0)
				if m := x.Lookup(own); m.Blocks > 0 && m.Latest() != g {
					t.Errorf("goroutine %d's chain found on upstream %d", g, m.Latest())
				}
				if m := x.Lookup(shared); m.Latest() >= 4 || m.Served == Places && m.Places[1].Upstream >= 4 {
					t.Errorf("the shared chain found on upstream %d", m.Latest())
				}
			}
		})
	}
	wg.Wait()
	if n := x.Len(); n > x.Capacity() {
		t.Errorf("%d entries, capacity %d", n, x.Capacity())
	}
}

// TestLookupHoles: entries evicted from inside a recorded chain make a
// lookup report a shorter match than there is, never one that is not
// there. One set of 16: the chain's 10 entries and 6 others as old, then
// k newer ones, which evict the chain's first k (of entries equally old,
// the first ways go first).
func TestLookupHoles(t *testing.T) {
	c := chainOf(1, 10)
	for _, tc := range []struct {
		evicted, want int
	}{
		{0, 10},
		{3, 10}, // the probes at blocks 5, 8, 9 and 10 find theirs
		{5, 0},  // block 5 is gone, and so are 2 and 1, the next probes
		{10, 0},
	} {
		var clk clock.Fake
		x := New(Options{Capacity: ways, Clock: &clk})
		x.Record(c, 1, 0)
		for i := range ways - len(c) {
			x.Record(chainOf(uint64(200+i), 1), 3, 0)
		}
		clk.Advance(time.Second)
		for i := range tc.evicted {
			x.Record(chainOf(uint64(100+i), 1), 2, 0)
		}
		if m := x.Lookup(c); m.Blocks != tc.want || m.Blocks > 0 && m.Latest() != 1 {
			t.Errorf("%d evicted: %+v, want %d blocks on upstream 1", tc.evicted, m, tc.want)
		}
	}
}
