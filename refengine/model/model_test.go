package model

import (
	"math"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// smallConfig is a model shape that exercises grouped-query attention,
// uneven rank splits and non-tile-multiple sizes while staying fast.
func smallConfig() Config {
	return Config{Dim: 48, HiddenDim: 100, Layers: 3, Heads: 6, KVHeads: 3, Vocab: 411, MaxSeq: 128, SharedClassifier: true}
}

func newTestModel(t testing.TB, cfg Config, ranks int) *Model {
	t.Helper()
	m, err := NewSeeded(cfg, 42, ranks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func testTokens(n, vocab int, salt int) []int {
	toks := make([]int, n)
	for i := range toks {
		toks[i] = (i*7919 + salt*104729 + 3) % vocab
	}
	return toks
}

// prefillLogits runs tokens through a fresh sequence in chunks of chunk
// tokens and returns the logits after the last one.
func prefillLogits(t testing.TB, m *Model, pool *BlockPool, tokens []int, chunk int) []float32 {
	t.Helper()
	s := pool.NewSeq()
	defer pool.Release(s)
	if !pool.Reserve(s, len(tokens)) {
		t.Fatal("Reserve failed")
	}
	logits := make([]float32, m.Cfg.Vocab)
	for i := 0; i < len(tokens); i += chunk {
		e := StepEntry{Seq: s, Tokens: tokens[i:min(i+chunk, len(tokens))]}
		if i+chunk >= len(tokens) {
			e.Logits = logits
		}
		if st := m.Step([]StepEntry{e}); st.Tokens != len(e.Tokens) {
			t.Fatalf("Step computed %d tokens, want %d", st.Tokens, len(e.Tokens))
		}
	}
	return logits
}

func assertClose(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, 0
	for i := range got {
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("%s: [%d] = %v", what, i, got[i])
		}
		if d := math.Abs(float64(got[i] - want[i])); d > worst {
			worst, at = d, i
		}
	}
	if worst > tol {
		t.Fatalf("%s: [%d] = %v, want %v (|diff| %.3g > %.3g)", what, at, got[at], want[at], worst, tol)
	}
}

// referenceForward is a direct transcription of llama2.c's transformer()
// for one token at a time with a contiguous KV cache; it shares nothing with
// the batched, paged, rank-split implementation except the raw weights.
func referenceForward(c Config, w *rawWeights, tokens []int) []float32 {
	dim, hs, kvd, hid := c.Dim, c.HeadSize(), c.KVDim(), c.HiddenDim
	kvMul := c.Heads / c.KVHeads
	kc := make([]float64, c.Layers*len(tokens)*kvd)
	vc := make([]float64, c.Layers*len(tokens)*kvd)
	mv := func(out []float64, wm []float32, x []float64, n, d int) {
		for i := 0; i < d; i++ {
			var s float64
			for j := 0; j < n; j++ {
				s += float64(wm[i*n+j]) * x[j]
			}
			out[i] = s
		}
	}
	norm := func(o, x []float64, wt []float32) {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		ss = 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		for j := range x {
			o[j] = float64(wt[j]) * ss * x[j]
		}
	}
	x := make([]float64, dim)
	xb := make([]float64, dim)
	q := make([]float64, dim)
	k := make([]float64, kvd)
	v := make([]float64, kvd)
	h1 := make([]float64, hid)
	h3 := make([]float64, hid)
	tmp := make([]float64, dim)
	var logits []float32
	for pos, tok := range tokens {
		for i := range x {
			x[i] = float64(w.embed[tok*dim+i])
		}
		for l := 0; l < c.Layers; l++ {
			norm(xb, x, w.rmsAtt[l*dim:])
			mv(q, w.wq[l*dim*dim:], xb, dim, dim)
			mv(k, w.wk[l*kvd*dim:], xb, dim, kvd)
			mv(v, w.wv[l*kvd*dim:], xb, dim, kvd)
			for i := 0; i < dim; i += 2 {
				freq := 1 / math.Pow(10000, float64(i%hs)/float64(hs))
				fcr, fci := math.Cos(float64(pos)*freq), math.Sin(float64(pos)*freq)
				q[i], q[i+1] = q[i]*fcr-q[i+1]*fci, q[i]*fci+q[i+1]*fcr
				if i < kvd {
					k[i], k[i+1] = k[i]*fcr-k[i+1]*fci, k[i]*fci+k[i+1]*fcr
				}
			}
			loff := l * len(tokens) * kvd
			copy(kc[loff+pos*kvd:], k)
			copy(vc[loff+pos*kvd:], v)
			for h := 0; h < c.Heads; h++ {
				att := make([]float64, pos+1)
				mx := math.Inf(-1)
				for t := 0; t <= pos; t++ {
					var s float64
					for i := 0; i < hs; i++ {
						s += q[h*hs+i] * kc[loff+t*kvd+(h/kvMul)*hs+i]
					}
					att[t] = s / math.Sqrt(float64(hs))
					mx = math.Max(mx, att[t])
				}
				var sum float64
				for t := range att {
					att[t] = math.Exp(att[t] - mx)
					sum += att[t]
				}
				for i := 0; i < hs; i++ {
					var s float64
					for t := range att {
						s += att[t] / sum * vc[loff+t*kvd+(h/kvMul)*hs+i]
					}
					xb[h*hs+i] = s
				}
			}
			mv(tmp, w.wo[l*dim*dim:], xb, dim, dim)
			for i := range x {
				x[i] += tmp[i]
			}
			norm(xb, x, w.rmsFFN[l*dim:])
			mv(h1, w.w1[l*hid*dim:], xb, dim, hid)
			mv(h3, w.w3[l*hid*dim:], xb, dim, hid)
			for i := range h1 {
				h1[i] = h1[i] / (1 + math.Exp(-h1[i])) * h3[i]
			}
			mv(tmp, w.w2[l*dim*hid:], h1, hid, dim)
			for i := range x {
				x[i] += tmp[i]
			}
		}
		norm(x, x, w.rmsFinal)
		out := make([]float64, c.Vocab)
		mv(out, w.wcls, x, dim, c.Vocab)
		logits = make([]float32, c.Vocab)
		for i, o := range out {
			logits[i] = float32(o)
		}
	}
	return logits
}

func TestForwardMatchesReference(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		cfg := smallConfig()
		m := newTestModel(t, cfg, 1)
		pool := m.NewBlockPool(8)
		toks := testTokens(37, cfg.Vocab, 1)
		got := prefillLogits(t, m, pool, toks, 37)
		want := referenceForward(cfg, seededWeights(cfg, 42), toks)
		assertClose(t, "logits", got, want, 1e-4)
	})
}
