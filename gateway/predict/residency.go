package predict

import "math/bits"

// Residency: whether a prefix the index expects cached on an upstream is
// still there. Engines evict their prefix caches least recently used first
// (vLLM's free block queue, SGLang's radix cache, the reference engine's),
// so a prefix is gone once the engine has made room for about its cache's
// worth of new tokens since the prefix was last used. Expected.Distance
// counts those tokens as far as this replica sent them; the distance past
// which the engine's reports show misses is learned, not configured, so
// it needs neither the engine's cache size nor the number of replicas
// sharing it (with N, this replica sees about 1/N of the distance, and
// learns a boundary about 1/N as far).

// The distance classes: half octaves from 64 tokens (class 0 below 64),
// the last class open, from 2^28 tokens.
const (
	distClasses = 46
	distFloor   = 64
)

// distClass is the class of a distance of d tokens.
func distClass(d uint64) int {
	if d < distFloor {
		return 0
	}
	l := bits.Len64(d) - 1 // ≥ 6
	half := int(d>>(l-1)) & 1
	return min(2*(l-6)+half+1, distClasses-1)
}

// residency is the engine's reports of hits and misses, by distance class,
// of the prefixes the index expected cached: decaying weights, as a fit's.
// Not safe for concurrent use: its Model's mutex guards it.
type residency struct {
	hits, misses [distClasses]float64
}

// decay scales every weight by d.
func (r *residency) decay(d float64) {
	for i := range r.hits {
		r.hits[i] *= d
		r.misses[i] *= d
	}
}

// add takes a report of a hit or a miss at distance d, with weight w.
func (r *residency) add(w float64, d uint64, hit bool) {
	if hit {
		r.hits[distClass(d)] += w
	} else {
		r.misses[distClass(d)] += w
	}
}

// evictedFrom is the first distance class predicted evicted: the boundary
// that misclassifies the least weight of reports (misses below it, hits
// from it on), the farthest on a tie; distClasses (none evicted) until a
// miss outweighs the hits beyond it. A boundary rather than a share a
// class: a miss among hits close by (a request that came while its prefix
// was still being computed) moves nothing.
func (r *residency) evictedFrom() int {
	var miscounted float64
	for _, h := range r.hits {
		miscounted += h
	}
	best, least := 0, miscounted
	for c := range distClasses {
		miscounted += r.misses[c] - r.hits[c]
		if miscounted <= least {
			best, least = c+1, miscounted
		}
	}
	return best
}
