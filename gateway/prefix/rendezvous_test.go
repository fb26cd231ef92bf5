package prefix

import (
	"math"
	"slices"
	"strconv"
	"testing"
)

// upstreams is n candidates named by their URLs, all with load.
func upstreams(n int, load int64) []Candidate {
	c := make([]Candidate, n)
	for i := range c {
		c[i] = Candidate{ID: Hash([]byte("http://engine-" + strconv.Itoa(i) + ":8000")), Load: load}
	}
	return c
}

// keys are n made-up affinity keys.
func keys(n int) []uint64 { return chainOf(99, n) }

// TestPickBoundedStable: with loads equal, a key picks the same upstream
// every time and in any order of the candidates, and keys spread evenly.
func TestPickBoundedStable(t *testing.T) {
	cands := upstreams(10, 3)
	reversed := slices.Clone(cands)
	slices.Reverse(reversed)
	counts := map[uint64]int{}
	for _, k := range keys(10_000) {
		i := PickBounded(k, cands, DefaultEpsilon)
		if again := PickBounded(k, cands, DefaultEpsilon); again != i {
			t.Fatalf("key %x: picked %d, then %d", k, i, again)
		}
		if r := PickBounded(k, reversed, DefaultEpsilon); reversed[r].ID != cands[i].ID {
			t.Fatalf("key %x: the order of the candidates changed the pick", k)
		}
		counts[cands[i].ID]++
	}
	for id, n := range counts {
		if n < 800 || n > 1200 { // 1,000 each expected; 6 standard deviations
			t.Errorf("upstream %x took %d of 10,000 keys", id, n)
		}
	}
}

// TestPickBoundedRemoval: an upstream's leaving moves only its keys.
func TestPickBoundedRemoval(t *testing.T) {
	cands := upstreams(10, 0)
	gone := cands[3].ID
	rest := slices.Delete(slices.Clone(cands), 3, 4)
	moved := 0
	for _, k := range keys(5000) {
		before := cands[PickBounded(k, cands, DefaultEpsilon)].ID
		after := rest[PickBounded(k, rest, DefaultEpsilon)].ID
		switch {
		case before == gone:
			moved++
		case after != before:
			t.Fatalf("key %x moved from %x, which stayed, to %x", k, before, after)
		}
	}
	if moved == 0 {
		t.Error("no key had the removed upstream")
	}
}

// TestPickBoundedBound: requests that all share one key (the worst case
// for balance) fill upstreams in their order of preference, the one picked
// never past ⌈(1+ε)·total/n⌉ once it holds the request (requests that end
// meanwhile may leave it over a bound that has since come down).
func TestPickBoundedBound(t *testing.T) {
	for _, eps := range []float64{-1, 0, 0.1, DefaultEpsilon, 1} {
		t.Run(strconv.FormatFloat(eps, 'g', -1, 64), func(t *testing.T) {
			cands := upstreams(7, 0)
			total := int64(0)
			for step := range 2000 {
				i := PickBounded(42, cands, eps)
				if i < 0 {
					t.Fatalf("step %d: no pick", step)
				}
				cands[i].Load++
				total++
				bound := int64(math.Ceil((1 + max(eps, 0)) * float64(total) / float64(len(cands))))
				if cands[i].Load > bound {
					t.Fatalf("step %d: upstream %d holds %d, over the bound %d (total %d)", step, i, cands[i].Load, bound, total)
				}
				if step%5 == 4 { // a request ends somewhere, now and then
					if j := step % len(cands); cands[j].Load > 0 {
						cands[j].Load--
						total--
					}
				}
			}
		})
	}
}

// TestPickBoundedEdges: no candidates, one, negative loads, one far over
// the mean.
func TestPickBoundedEdges(t *testing.T) {
	if i := PickBounded(1, nil, DefaultEpsilon); i != -1 {
		t.Errorf("no candidates: %d, want -1", i)
	}
	if i := PickBounded(1, upstreams(1, 1000), DefaultEpsilon); i != 0 {
		t.Errorf("one candidate: %d, want 0", i)
	}
	cands := upstreams(4, 0)
	cands[2].Load = -5
	if i := PickBounded(1, cands, 0); i < 0 {
		t.Error("negative load: no pick")
	}
	for _, k := range keys(200) {
		cands := upstreams(4, 1)
		pref := PickBounded(k, cands, DefaultEpsilon)
		cands[pref].Load = 100
		if i := PickBounded(k, cands, DefaultEpsilon); i == pref {
			t.Fatalf("key %x: picked upstream %d at load 100 beside loads of 1", k, i)
		}
	}
}
