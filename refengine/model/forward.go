package model

import (
	"fmt"
	"math"
	"time"
)

// StepEntry is one sequence's share of a Step.
type StepEntry struct {
	// Seq receives Tokens at positions Seq.Len()...; the room must have
	// been Reserved. A Seq may appear at most once per Step.
	Seq *Seq
	// Tokens are appended to the sequence: a prefill chunk or one decode
	// token. An entry without tokens is skipped.
	Tokens []int
	// Logits, when non-nil, receives the logits (len >= Cfg.Vocab,
	// caller-allocated) predicting the token after the last of Tokens.
	// nil means not needed (a prefill chunk that is not the last).
	Logits []float32
}

// StepStats describes one Step.
type StepStats struct {
	Tokens int           // tokens computed in this step
	Sync   time.Duration // time ranks waited at layer barriers (max over ranks per barrier, summed)
}

// stepPlan is the per-step batch description shared read-only by the ranks.
type stepPlan struct {
	entries   []StepEntry
	rows      int
	tok       []int32
	pos       []int32
	first     []int // first row of each entry (-1 if skipped)
	logitRows []int
	logitEnt  []int
	cos, sin  []float32 // rows × hs/2 rotary factors
}

// Step runs one forward pass over all entries: every entry's tokens are
// appended to its sequence's KV cache and, where asked, the logits after its
// last token are written. Weights are read once per step for the whole batch.
// Step is not safe for concurrent use; it panics if an entry's room was not
// reserved, a token is out of range, or the model is closed.
func (m *Model) Step(entries []StepEntry) StepStats {
	if m.closed.Load() {
		panic("model: Step after Close")
	}
	c := m.Cfg
	pl := &m.plan
	pl.entries = entries
	pl.rows = 0
	pl.tok, pl.pos = pl.tok[:0], pl.pos[:0]
	pl.first = pl.first[:0]
	pl.logitRows, pl.logitEnt = pl.logitRows[:0], pl.logitEnt[:0]
	for e, en := range entries {
		n := len(en.Tokens)
		if n == 0 {
			pl.first = append(pl.first, -1)
			continue
		}
		s := en.Seq
		if s.n+n > len(s.blocks)*BlockSize {
			panic(fmt.Sprintf("model: Step entry %d: %d tokens at position %d exceed the reserved %d; call Reserve first",
				e, n, s.n, len(s.blocks)*BlockSize))
		}
		if en.Logits != nil && len(en.Logits) < c.Vocab {
			panic(fmt.Sprintf("model: Step entry %d: Logits has length %d, need %d", e, len(en.Logits), c.Vocab))
		}
		pl.first = append(pl.first, pl.rows)
		for i, t := range en.Tokens {
			if t < 0 || t >= c.Vocab {
				panic(fmt.Sprintf("model: Step entry %d: token %d out of range [0, %d)", e, t, c.Vocab))
			}
			pl.tok = append(pl.tok, int32(t))
			pl.pos = append(pl.pos, int32(s.n+i))
		}
		pl.rows += n
		if en.Logits != nil {
			pl.logitRows = append(pl.logitRows, pl.rows-1)
			pl.logitEnt = append(pl.logitEnt, e)
		}
	}
	if pl.rows == 0 {
		return StepStats{}
	}
	half := c.HeadSize() / 2
	pl.cos = grow(pl.cos, pl.rows*half)
	pl.sin = grow(pl.sin, pl.rows*half)
	for r, p := range pl.pos {
		for j, f := range m.ropeFreq {
			s, co := math.Sincos(float64(float32(p) * f))
			pl.cos[r*half+j], pl.sin[r*half+j] = float32(co), float32(s)
		}
	}
	for par := range m.partial {
		if len(m.partial[par]) != len(m.ranks) {
			m.partial[par] = make([][]float32, len(m.ranks))
		}
		for r := range m.partial[par] {
			m.partial[par][r] = grow(m.partial[par][r], pl.rows*c.Dim)
		}
	}

	m.stepDone.Add(len(m.ranks) - 1)
	for _, rk := range m.ranks[1:] {
		rk.start <- pl
	}
	m.runRank(m.ranks[0], pl)
	m.stepDone.Wait()

	for _, en := range entries {
		if len(en.Tokens) > 0 {
			en.Seq.n += len(en.Tokens)
		}
	}
	var st StepStats
	st.Tokens = pl.rows
	if len(m.ranks) > 1 {
		for i := range m.ranks[0].waits {
			var mx time.Duration
			for _, rk := range m.ranks {
				mx = max(mx, rk.waits[i])
			}
			st.Sync += mx
		}
	}
	pl.entries = nil
	return st
}

// grow returns s resized to n, reallocating only when the capacity is short.
// The contents are unspecified.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n, n+n/4)
	}
	return s[:n]
}

// runRank computes rank rk's share of the step described by pl.
func (m *Model) runRank(rk *rank, pl *stepPlan) {
	c := m.Cfg
	B, dim, hs := pl.rows, c.Dim, c.HeadSize()
	nh, nkv, nhid := rk.h1-rk.h0, rk.kv1-rk.kv0, rk.hid1-rk.hid0
	nq := (nh + 2*nkv) * hs
	rk.x = grow(rk.x, B*dim)
	rk.xb = grow(rk.xb, B*dim)
	rk.qkv = grow(rk.qkv, B*nq)
	rk.attOut = grow(rk.attOut, B*nh*hs)
	rk.h = grow(rk.h, B*2*nhid)
	rk.hb = grow(rk.hb, B*nhid)
	x, xb, qkv, attOut, h, hb := rk.x, rk.xb, rk.qkv, rk.attOut, rk.h, rk.hb

	for r, t := range pl.tok {
		copy(x[r*dim:(r+1)*dim], m.embed[int(t)*dim:])
	}
	nb := 0
	for l := 0; l < c.Layers; l++ {
		ly := &rk.layers[l]
		// Attention.
		rmsnormRows(xb, x, m.rmsAtt[l*dim:(l+1)*dim], B, dim)
		matmul(qkv, nq, xb, dim, B, &ly.qkv)
		m.ropeAndStore(rk, pl, l, qkv, nq)
		m.attention(rk, pl, l, qkv, nq, attOut)
		part := m.partial[nb&1][rk.id][:B*dim]
		matmul(part, dim, attOut, nh*hs, B, &ly.wo)
		if s := m.straggler.Load(); s != 0 && int(s&0xff) == rk.id {
			time.Sleep(time.Duration(s >> 8))
		}
		m.allReduce(rk, nb, x)
		nb++

		// Gated MLP: w2(silu(w1 x) * w3 x).
		rmsnormRows(xb, x, m.rmsFFN[l*dim:(l+1)*dim], B, dim)
		matmul(h, 2*nhid, xb, dim, B, &ly.w13)
		for r := 0; r < B; r++ {
			a := h[r*2*nhid : r*2*nhid+nhid]
			g := h[r*2*nhid+nhid : (r+1)*2*nhid]
			o := hb[r*nhid : (r+1)*nhid]
			for j, v := range a {
				o[j] = v / (1 + float32(math.Exp(float64(-v)))) * g[j]
			}
		}
		part = m.partial[nb&1][rk.id][:B*dim]
		matmul(part, dim, hb, nhid, B, &ly.w2)
		m.allReduce(rk, nb, x)
		nb++
	}

	// Final norm and this rank's slice of the classifier, only for the rows
	// whose logits were asked for.
	nl := len(pl.logitRows)
	if nl == 0 {
		return
	}
	for i, r := range pl.logitRows {
		rmsnorm(xb[i*dim:(i+1)*dim], x[r*dim:(r+1)*dim], m.rmsFinal)
	}
	nv := rk.v1 - rk.v0
	rk.out = grow(rk.out, nl*nv)
	matmul(rk.out, nv, xb, dim, nl, &rk.cls)
	for i, e := range pl.logitEnt {
		copy(pl.entries[e].Logits[rk.v0:rk.v1], rk.out[i*nv:(i+1)*nv])
	}
}

// allReduce waits for every rank's partial output of barrier nb and adds
// their sum (in rank order, so all replicas stay bit-identical) to x.
func (m *Model) allReduce(rk *rank, nb int, x []float32) {
	parts := m.partial[nb&1]
	if len(parts) > 1 {
		t0 := time.Now()
		m.bar.wait()
		rk.waits[nb] = time.Since(t0)
	}
	for _, p := range parts {
		p = p[:len(x)]
		for i, v := range p {
			x[i] += v
		}
	}
}

// rmsnorm writes o = weight * x / sqrt(mean(x²) + 1e-5), as llama2.c.
func rmsnorm(o, x, weight []float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	ss = ss/float32(len(x)) + 1e-5
	ss = 1 / float32(math.Sqrt(float64(ss)))
	o = o[:len(x)]
	weight = weight[:len(x)]
	for j, v := range x {
		o[j] = weight[j] * (ss * v)
	}
}

func rmsnormRows(o, x, weight []float32, rows, dim int) {
	for r := 0; r < rows; r++ {
		rmsnorm(o[r*dim:(r+1)*dim], x[r*dim:(r+1)*dim], weight)
	}
}

// ropeAndStore rotates this rank's query and key heads of every row by the
// row's position and writes keys and values into the KV cache.
func (m *Model) ropeAndStore(rk *rank, pl *stepPlan, l int, qkv []float32, nq int) {
	hs := m.Cfg.HeadSize()
	half := hs / 2
	nh, nkv := rk.h1-rk.h0, rk.kv1-rk.kv0
	for e, en := range pl.entries {
		r0 := pl.first[e]
		if r0 < 0 {
			continue
		}
		s := en.Seq
		for i := range en.Tokens {
			r := r0 + i
			row := qkv[r*nq : (r+1)*nq]
			cs, sn := pl.cos[r*half:(r+1)*half], pl.sin[r*half:(r+1)*half]
			for hd := 0; hd < nh+nkv; hd++ { // query heads, then key heads
				v := row[hd*hs : (hd+1)*hs]
				for j := 0; j < half; j++ {
					v0, v1 := v[2*j], v[2*j+1]
					v[2*j] = v0*cs[j] - v1*sn[j]
					v[2*j+1] = v0*sn[j] + v1*cs[j]
				}
			}
			pos := int(pl.pos[r])
			b := s.blocks[pos/BlockSize]
			for g := 0; g < nkv; g++ {
				k := row[(nh+g)*hs : (nh+g+1)*hs]
				v := row[(nh+nkv+g)*hs : (nh+nkv+g+1)*hs]
				s.pool.store(b, l, rk.kv0+g, pos%BlockSize, k, v)
			}
		}
	}
}

// attention computes causal softmax attention for this rank's query heads
// of every row over its sequence's cached keys and values. Queries of one
// sequence are processed in tiles of 4 consecutive positions, so a prefill
// reads every cached block once per tile; scores against a block and the
// weighted sum of its values are both register-tiled kernel calls on the
// block's packed panels.
func (m *Model) attention(rk *rank, pl *stepPlan, l int, qkv []float32, nq int, out []float32) {
	c := m.Cfg
	hs := c.HeadSize()
	kvMul := c.Heads / c.KVHeads
	nh := rk.h1 - rk.h0
	vpan := (hs + panelWidth - 1) / panelWidth
	scale := 1 / float32(math.Sqrt(float64(hs)))
	var tile [4 * panelWidth]float32
	for e, en := range pl.entries {
		r0 := pl.first[e]
		if r0 < 0 {
			continue
		}
		s := en.Seq
		pool := s.pool
		n := len(en.Tokens)
		pos0 := int(pl.pos[r0])
		for i := 0; i < n; {
			nr := 1
			if n-i >= 4 {
				nr = 4
			}
			ctx := pos0 + i + nr // keys visible to the last row of the tile
			nblk := (ctx + BlockSize - 1) / BlockSize
			lds := nblk * BlockSize
			rk.scores = grow(rk.scores, nr*lds+nr*vpan*panelWidth)
			sc := rk.scores[:nr*lds]
			acc := rk.scores[nr*lds : nr*lds+nr*vpan*panelWidth]
			for hh := 0; hh < nh; hh++ {
				g := (rk.h0 + hh) / kvMul
				q := qkv[(r0+i)*nq+hh*hs:]
				// Scores against every block.
				for bi := 0; bi < nblk; bi++ {
					keys := pool.keys(s.blocks[bi], l, g)
					if nr == 4 {
						kern4x16(sc[bi*BlockSize:], lds, q, nq, keys, hs)
					} else {
						kern1x16(sc[bi*BlockSize:], q, keys, hs)
					}
				}
				// Causal softmax per row; masked slots become exact zeros.
				for j := 0; j < nr; j++ {
					row := sc[j*lds : (j+1)*lds]
					valid := pos0 + i + j + 1
					mx := float32(math.Inf(-1))
					for _, v := range row[:valid] {
						mx = max(mx, v)
					}
					var sum float32
					for t, v := range row[:valid] {
						ev := expf((v - mx) * scale)
						row[t] = ev
						sum += ev
					}
					inv := 1 / sum
					for t := range row[:valid] {
						row[t] *= inv
					}
					clear(row[valid:])
				}
				// Weighted sum of values: acc = scores · V, block by block.
				clear(acc)
				ldacc := vpan * panelWidth
				for bi := 0; bi < nblk; bi++ {
					vals := pool.values(s.blocks[bi], l, g)
					for cp := 0; cp < vpan; cp++ {
						panel := vals[cp*panelWidth*BlockSize : (cp+1)*panelWidth*BlockSize]
						if nr == 4 {
							kern4x16(tile[:], panelWidth, sc[bi*BlockSize:], lds, panel, BlockSize)
						} else {
							kern1x16(tile[:], sc[bi*BlockSize:], panel, BlockSize)
						}
						for j := 0; j < nr; j++ {
							a := acc[j*ldacc+cp*panelWidth : j*ldacc+(cp+1)*panelWidth]
							for x, v := range tile[j*panelWidth : (j+1)*panelWidth] {
								a[x] += v
							}
						}
					}
				}
				for j := 0; j < nr; j++ {
					copy(out[((r0+i+j)*nh+hh)*hs:((r0+i+j)*nh+hh+1)*hs], acc[j*ldacc:])
				}
			}
			i += nr
		}
	}
}

// expf is a float32 e^x accurate to a few ulp (Cody-Waite range reduction
// and a degree-6 polynomial); it returns 0 below -87.
func expf(x float32) float32 {
	if x < -87 {
		return 0
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi - n*ln2lo
	p := float32(1.0 / 720)
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}
