package prefix

import "math"

// DefaultEpsilon is PickBounded's slack when the caller has no other: an
// upstream may take up to 25 % more than the mean load.
const DefaultEpsilon = 0.25

// Candidate is an upstream in rotation as PickBounded weighs it.
type Candidate struct {
	// ID names the upstream the same way in every replica and across
	// reloads: Hash of its URL, say, not its place in a list.
	ID uint64
	// Load is its requests now queued for or in flight on it.
	Load int64
}

// PickBounded returns the index in cands of the upstream for a request with
// no history, whose key names what it shares with others (a chain's hash at
// the end of its first message: AppendChat's lead), or -1 when cands is
// empty. It is rendezvous (highest random weight) hashing with bounded
// loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded
// Loads", 2018): of the upstreams whose load is below the bound
// ⌈(1+eps)·(total+1)/n⌉ (total: the loads summed; +1, this request), the
// one of the highest weight, XXH64's avalanche of key ^ ID. The bound never
// excludes the least loaded, and taking a request keeps its pick at or
// under the bound. With loads under the bound, a key picks the same
// upstream in every replica, and an upstream's leaving moves only the keys
// it had, each to its second choice. eps below 0 counts as 0 (a perfect
// balance, the affinity only among the least loaded). O(len(cands)); no
// allocation.
func PickBounded(key uint64, cands []Candidate, eps float64) int {
	if len(cands) == 0 {
		return -1
	}
	total := int64(0)
	for _, c := range cands {
		total += max(c.Load, 0)
	}
	bound := Bound(total, len(cands), eps)
	best, bestW := -1, uint64(0)
	for i, c := range cands {
		if c.Load >= bound {
			continue
		}
		if w := Weight(key, c.ID); best < 0 || w > bestW {
			best, bestW = i, w
		}
	}
	return best
}

// Bound is PickBounded's bound for n upstreams holding total requests: an
// upstream whose load is at or over ⌈(1+eps)·(total+1)/n⌉ is not chosen
// (eps below 0 counts as 0). For a caller that weighs upstreams its own
// way (the gateway's least_ttft) under the same bound.
func Bound(total int64, n int, eps float64) int64 {
	return int64(math.Ceil((1 + max(eps, 0)) * float64(total+1) / float64(n)))
}

// Weight is key's rendezvous weight on the upstream id: PickBounded takes
// the highest.
func Weight(key, id uint64) uint64 { return avalanche(key ^ id) }
