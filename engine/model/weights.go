package model

import (
	"math"
	"math/rand/v2"
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

// seededWeights initialises a model deterministically from seed. Matrices are
// uniform with standard deviation 1/sqrt(fan_in) (output projections are
// further scaled by 1/sqrt(2·layers) so the residual stream stays bounded),
// RMSNorm gains are 1, and embeddings have standard deviation 0.2, which
// gives shared-classifier logits a standard deviation of about 3.
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
	resid := 1 / math.Sqrt(2*float64(c.Layers))
	fill(w.embed, 0.2)
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
	if !c.SharedClassifier {
		fill(w.wcls, 0.2)
	}
	return w
}
