package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

type probIndex struct {
	p float32
	i int
}

var sampleScratch = sync.Pool{New: func() any { return new([]probIndex) }}

// Sample picks the next token from logits. temperature 0 (or less) is greedy
// argmax (ties: the lowest id). Otherwise logits are divided by temperature,
// softmaxed, and a token is drawn with rng; 0 < topP < 1 restricts the draw
// to the smallest set of most likely tokens whose probability exceeds topP
// (nucleus sampling, as llama2.c). rng must not be nil when temperature > 0;
// a seeded rng gives a reproducible draw. logits is not modified. Safe for
// concurrent use with distinct rngs.
func Sample(logits []float32, temperature, topP float32, rng *rand.Rand) int {
	if len(logits) <= 1 {
		return 0
	}
	if temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return best
	}
	bufp := sampleScratch.Get().(*[]probIndex)
	defer sampleScratch.Put(bufp)
	probs := (*bufp)[:0]
	mx := logits[0]
	for _, v := range logits {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range logits {
		p := float32(math.Exp(float64((v - mx) / temperature)))
		probs = append(probs, probIndex{p, i})
		sum += float64(p)
	}
	*bufp = probs
	inv := float32(1 / sum)
	for k := range probs {
		probs[k].p *= inv
	}
	r := rng.Float32()
	if topP <= 0 || topP >= 1 {
		var cdf float32
		for _, pi := range probs {
			cdf += pi.p
			if r < cdf {
				return pi.i
			}
		}
		return len(probs) - 1
	}
	// Nucleus: tokens below (1-topP)/(n-1) cannot be in the set.
	cutoff := (1 - topP) / float32(len(probs)-1)
	cand := probs[:0]
	for _, pi := range probs {
		if pi.p >= cutoff {
			cand = append(cand, pi)
		}
	}
	slices.SortFunc(cand, func(a, b probIndex) int {
		switch {
		case a.p > b.p:
			return -1
		case a.p < b.p:
			return 1
		}
		return a.i - b.i
	})
	var cum float32
	last := len(cand) - 1
	for k, pi := range cand {
		cum += pi.p
		if cum > topP {
			last = k
			break
		}
	}
	r *= cum
	var cdf float32
	for _, pi := range cand[:last+1] {
		cdf += pi.p
		if r < cdf {
			return pi.i
		}
	}
	return cand[last].i
}
