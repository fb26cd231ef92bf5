package model

import (
	"math"
	"math/rand/v2"
	"slices"
)

// rawWeights holds the tensors in llama2.c's layout (row-major (out, in)
// matrices, layers concatenated). It is the exchange format between the
// seeded initialiser, the checkpoint reader/writer and the rank packer.
type rawWeights struct {
	embed    []float32 // (vocab, dim)
	rmsAtt   []float32 // (layers, dim)
	wq       []float32 // (layers, heads*hs, dim)
	wk       []float32 // (layers, kvdim, dim)
	wv       []float32 // (layers, kvdim, dim)
	wo       []float32 // (layers, dim, heads*hs)
	rmsFFN   []float32 // (layers, dim)
	w1       []float32 // (layers, hidden, dim)
	w2       []float32 // (layers, dim, hidden)
	w3       []float32 // (layers, hidden, dim)
	rmsFinal []float32 // (dim)
	wcls     []float32 // (vocab, dim); aliases embed when the classifier is shared
}

func newRawWeights(c Config) *rawWeights {
	hs := c.HeadSize()
	q := c.Heads * hs
	w := &rawWeights{
		embed:    make([]float32, c.Vocab*c.Dim),
		rmsAtt:   make([]float32, c.Layers*c.Dim),
		wq:       make([]float32, c.Layers*q*c.Dim),
		wk:       make([]float32, c.Layers*c.KVDim()*c.Dim),
		wv:       make([]float32, c.Layers*c.KVDim()*c.Dim),
		wo:       make([]float32, c.Layers*c.Dim*q),
		rmsFFN:   make([]float32, c.Layers*c.Dim),
		w1:       make([]float32, c.Layers*c.HiddenDim*c.Dim),
		w2:       make([]float32, c.Layers*c.Dim*c.HiddenDim),
		w3:       make([]float32, c.Layers*c.HiddenDim*c.Dim),
		rmsFinal: make([]float32, c.Dim),
	}
	if c.SharedClassifier {
		w.wcls = w.embed
	} else {
		w.wcls = make([]float32, c.Vocab*c.Dim)
	}
	return w
}

// tensors lists the tensors in llama2.c checkpoint order (without the
// freq_cis tables, which the reader skips and the writer zero-fills).
func (w *rawWeights) tensors() [][]float32 {
	return [][]float32{w.embed, w.rmsAtt, w.wq, w.wk, w.wv, w.wo, w.rmsFFN, w.w1, w.w2, w.w3, w.rmsFinal}
}

// seededWeights initialises a model deterministically from seed. The layers'
// matrices are uniform with standard deviation 1/sqrt(fan_in) and RMSNorm
// gains are 1. With a separate classifier and a vocabulary the default
// tokenizer fills, the embedding and classifier hold the embedded corpus's
// bigram table (setCorpusBigrams) and the output projections are scaled by
// bigramLayerGain/sqrt(2·layers), so the layers compute at full size but
// only nudge the residual stream. Otherwise embeddings (and the classifier)
// are noise of standard deviation 0.2, which gives shared-classifier logits
// a standard deviation of about 3, and the output projections are scaled by
// 1/sqrt(2·layers) so the residual stream stays bounded.
func seededWeights(c Config, seed uint64) *rawWeights {
	w := newRawWeights(c)
	src := rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
	fill := func(dst []float32, std float64) {
		// Uniform on [-a, a] has standard deviation a/sqrt(3).
		a := float32(std * math.Sqrt(3) / (1 << 31))
		for i := 0; i+1 < len(dst); i += 2 {
			u := src.Uint64()
			dst[i] = float32(int32(uint32(u))) * a
			dst[i+1] = float32(int32(u>>32)) * a
		}
		if len(dst)%2 == 1 {
			dst[len(dst)-1] = float32(int32(uint32(src.Uint64()))) * a
		}
	}
	ones := func(dst []float32) {
		for i := range dst {
			dst[i] = 1
		}
	}
	bigrams := !c.SharedClassifier && c.Vocab >= len(baseVocab())
	resid := 1 / math.Sqrt(2*float64(c.Layers))
	if bigrams {
		resid *= bigramLayerGain
	} else {
		fill(w.embed, 0.2)
	}
	ones(w.rmsAtt)
	fill(w.wq, 1/math.Sqrt(float64(c.Dim)))
	fill(w.wk, 1/math.Sqrt(float64(c.Dim)))
	fill(w.wv, 1/math.Sqrt(float64(c.Dim)))
	fill(w.wo, resid/math.Sqrt(float64(c.Heads*c.HeadSize())))
	ones(w.rmsFFN)
	fill(w.w1, 1/math.Sqrt(float64(c.Dim)))
	fill(w.w2, resid/math.Sqrt(float64(c.HiddenDim)))
	fill(w.w3, 1/math.Sqrt(float64(c.Dim)))
	ones(w.rmsFinal)
	switch {
	case bigrams:
		setCorpusBigrams(w, c)
	case !c.SharedClassifier:
		fill(w.wcls, 0.2)
	}
	return w
}

const (
	// bigramLogit is the logit of a successor of probability 1: a token
	// that follows the current one with probability p gets bigramLogit+ln p,
	// every other token 0, so at temperature 1 the tokens that never follow
	// it share a probability of about vocab·e^-bigramLogit (3e-5 for 4096).
	bigramLogit = 20
	// bigramLayerGain scales the layers' output projections of a bigram
	// model, so that their sum moves the logits by a fraction of a unit.
	bigramLayerGain = 0.1
)

// setCorpusBigrams sets w.embed and a separate w.wcls so that the logits
// after token a, with nothing added by the layers, are bigramLogit+ln P(b|a)
// for every token b that follows a in the embedded corpus (encoded by the
// default tokenizer) and 0 for every other b. Each token that has successors
// owns one axis of the residual stream, the most frequent first while axes
// last; all other tokens (the prompt's words the corpus does not use, BOS)
// share the last axis, whose row is the corpus's unigram distribution.
// Embeddings are axis vectors of RMS 1, which RMSNorm leaves unchanged.
func setCorpusBigrams(w *rawWeights, c Config) {
	toks := DefaultTokenizer(c).Encode(corpus)
	type pair struct{ a, b int }
	pairs := map[pair]int{}
	from := map[int]int{} // occurrences of a followed by a token
	unigram := map[int]int{}
	for i, t := range toks {
		unigram[t]++
		if i+1 < len(toks) {
			pairs[pair{t, toks[i+1]}]++
			from[t]++
		}
	}
	preds := make([]int, 0, len(from))
	for t := range from {
		preds = append(preds, t)
	}
	slices.SortFunc(preds, func(x, y int) int {
		if from[x] != from[y] {
			return from[y] - from[x]
		}
		return x - y
	})
	shared := c.Dim - 1
	preds = preds[:min(len(preds), shared)]
	axis := make(map[int]int, len(preds))
	for k, t := range preds {
		axis[t] = k
	}
	unit := float32(math.Sqrt(float64(c.Dim)))
	for t := 0; t < c.Vocab; t++ {
		k, own := axis[t]
		if !own {
			k = shared
		}
		w.embed[t*c.Dim+k] = unit
	}
	// The classifier's column for an axis is its row of logits, divided by
	// the embedding's value on the axis.
	logit := func(b, k int, p float64) {
		w.wcls[b*c.Dim+k] = float32(bigramLogit+math.Log(p)) / unit
	}
	for pr, n := range pairs {
		if k, own := axis[pr.a]; own {
			logit(pr.b, k, float64(n)/float64(from[pr.a]))
		}
	}
	for b, n := range unigram {
		logit(b, shared, float64(n)/float64(len(toks)))
	}
}
