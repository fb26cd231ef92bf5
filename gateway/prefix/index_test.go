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

// TestLookup: the longest recorded prefix, who served it and when.
func TestLookup(t *testing.T) {
	type record struct {
		chain    []uint64
		upstream uint32
		at       time.Duration
	}
	long := chainOf(1, 100)
	for _, tc := range []struct {
		name    string
		records []record
		query   []uint64
		want    Match
	}{
		{"nothing recorded", nil, long, Match{}},
		{"empty chain", []record{{long, 1, 0}}, nil, Match{}},
		{"the whole chain", []record{{long, 3, time.Second}}, long, Match{Blocks: 100, Upstream: 3, At: time.Second}},
		{"a longer chain than recorded", []record{{long[:40], 2, 0}}, long, Match{Blocks: 40, Upstream: 2}},
		{"a shorter chain than recorded", []record{{long, 2, 0}}, long[:7], Match{Blocks: 7, Upstream: 2}},
		{"one block", []record{{long[:1], 5, 0}}, long, Match{Blocks: 1, Upstream: 5}},
		{"diverging after a shared prefix", []record{{long[:30], 4, 0}}, append(long[:10:10], chainOf(2, 50)...), Match{Blocks: 10, Upstream: 4}},
		{"another family", []record{{long, 1, 0}}, chainOf(3, 100), Match{}},
		{"the last to serve the prefix", []record{{long[:50], 1, time.Second}, {long[:20], 2, 2 * time.Second}}, long[:20], Match{Blocks: 20, Upstream: 2, At: 2 * time.Second}},
		{"the longest, not the latest", []record{{long[:50], 1, time.Second}, {long[:20], 2, 2 * time.Second}}, long, Match{Blocks: 50, Upstream: 1, At: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clk clock.Fake
			x := New(Options{Capacity: 4096, Clock: &clk})
			for _, r := range tc.records {
				clk.Advance(r.at - clk.Now())
				x.Record(r.chain, r.upstream)
			}
			if got := x.Lookup(tc.query); got != tc.want {
				t.Errorf("Lookup = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLookupZeroHash: a hash of 0 is kept, not taken for an empty way.
func TestLookupZeroHash(t *testing.T) {
	x := New(Options{Capacity: 8})
	x.Record([]uint64{0}, 9)
	if m := x.Lookup([]uint64{0}); m.Blocks != 1 || m.Upstream != 9 {
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
		x.Record(chainOf(f+1, chainLen), 1)
		if f%10 == 0 { // 160 new entries between two uses of hot
			x.Record(hot, 2)
		}
	}
	if n := x.Len(); n != x.Capacity() {
		t.Errorf("%d entries after the flood, want the capacity, %d", n, x.Capacity())
	}
	if m := x.Lookup(first); m.Blocks != 0 {
		t.Errorf("the flood's first chain is still there: %+v", m)
	}
	if m := x.Lookup(hot); m.Blocks != len(hot) || m.Upstream != 2 {
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
				x.Record(own, g)
				x.Record(shared, g)
				if m := x.Lookup(own); m.Blocks > 0 && m.Upstream != g {
					t.Errorf("goroutine %d's chain found on upstream %d", g, m.Upstream)
				}
				if m := x.Lookup(shared); m.Upstream >= 4 {
					t.Errorf("the shared chain found on upstream %d", m.Upstream)
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
		x.Record(c, 1)
		for i := range ways - len(c) {
			x.Record(chainOf(uint64(200+i), 1), 3)
		}
		clk.Advance(time.Second)
		for i := range tc.evicted {
			x.Record(chainOf(uint64(100+i), 1), 2)
		}
		if m := x.Lookup(c); m.Blocks != tc.want || m.Blocks > 0 && m.Upstream != 1 {
			t.Errorf("%d evicted: %+v, want %d blocks on upstream 1", tc.evicted, m, tc.want)
		}
	}
}
