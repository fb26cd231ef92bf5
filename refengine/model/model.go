package model

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Model is a loaded transformer split across tensor-parallel ranks.
//
// Rank r owns a contiguous range of key/value heads (and the query heads
// that read them), a range of MLP hidden columns and a range of the
// vocabulary. Every layer ends twice in an all-reduce (after attention and
// after the MLP): each rank publishes its partial output, waits at a barrier
// for the others, then sums all partials into its own copy of the residual
// stream. Rank 0 runs on the goroutine calling Step; ranks 1..N-1 are
// goroutines started by the constructor and stopped by Close.
//
// Cores: a rank is one goroutine and uses at most one core; ranks=1 is a
// single-device baseline and does not spread matmuls over cores. On a
// 2-core machine ranks=2 is the recommended setting: it uses both cores for
// every layer (see model_timing_test.go for single-stream decode at ranks 1
// and 2) at the price of two barriers per layer, whose waits are reported as
// StepStats.Sync.
//
// Cfg must not be modified. Step is not safe for concurrent use; Ranks,
// SetStraggler and Close may be called from any goroutine.
type Model struct {
	Cfg Config

	embed    []float32 // (vocab, dim), shared with the classifier of shared checkpoints
	rmsAtt   []float32
	rmsFFN   []float32
	rmsFinal []float32
	ropeFreq []float32 // hs/2 rotary frequencies, llama2.c's float32 formula

	ranks   []*rank
	bar     barrier
	partial [2][][]float32 // [parity][rank] partial outputs, rows×dim
	plan    stepPlan

	straggler atomic.Uint64 // duration<<8 | rank; 0 = off
	closed    atomic.Bool
	closeOnce sync.Once
	quit      chan struct{}
	workers   sync.WaitGroup
	stepDone  sync.WaitGroup
}

// rank is one tensor-parallel shard: its weights, scratch buffers and the
// barrier waits it measured in the current step.
type rank struct {
	id                 int
	h0, h1             int // query heads [h0, h1)
	kv0, kv1           int // kv heads [kv0, kv1)
	hid0, hid1         int // MLP hidden columns
	v0, v1             int // vocabulary rows of the classifier
	layers             []rankLayer
	cls                packed
	start              chan *stepPlan
	waits              []time.Duration // per barrier of the current step
	x, xb, qkv, attOut []float32
	h, hb, scores, out []float32
}

type rankLayer struct {
	qkv packed // rows: my q heads, my k heads, my v heads
	wo  packed // all dim rows, my q-head columns
	w13 packed // rows: my w1 rows, my w3 rows
	w2  packed // all dim rows, my hidden columns
}

// NewSeeded builds a model of shape cfg whose weights come deterministically
// from seed and, with a separate classifier, the embedded corpus (see
// seededWeights), split over ranks tensor-parallel ranks (1 <= ranks <=
// KVHeads). It downloads and reads nothing.
func NewSeeded(cfg Config, seed uint64, ranks int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return build(cfg, seededWeights(cfg, seed), ranks)
}

func build(cfg Config, w *rawWeights, ranks int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ranks < 1 || ranks > cfg.KVHeads {
		return nil, fmt.Errorf("model: ranks must be in [1, %d] (kv heads), got %d", cfg.KVHeads, ranks)
	}
	if ranks > 255 {
		return nil, errors.New("model: at most 255 ranks")
	}
	m := &Model{
		Cfg:      cfg,
		embed:    w.embed,
		rmsAtt:   w.rmsAtt,
		rmsFFN:   w.rmsFFN,
		rmsFinal: w.rmsFinal,
		quit:     make(chan struct{}),
	}
	hs := cfg.HeadSize()
	m.ropeFreq = make([]float32, hs/2)
	for j := range m.ropeFreq {
		e := float32(2*j) / float32(hs)
		m.ropeFreq[j] = float32(1 / math.Pow(10000, float64(e)))
	}
	kvMul := cfg.Heads / cfg.KVHeads
	m.ranks = make([]*rank, ranks)
	for r := range m.ranks {
		rk := &rank{
			id:    r,
			kv0:   r * cfg.KVHeads / ranks,
			kv1:   (r + 1) * cfg.KVHeads / ranks,
			hid0:  r * cfg.HiddenDim / ranks,
			hid1:  (r + 1) * cfg.HiddenDim / ranks,
			v0:    r * cfg.Vocab / ranks,
			v1:    (r + 1) * cfg.Vocab / ranks,
			waits: make([]time.Duration, 2*cfg.Layers),
			start: make(chan *stepPlan),
		}
		rk.h0, rk.h1 = rk.kv0*kvMul, rk.kv1*kvMul
		rk.layers = make([]rankLayer, cfg.Layers)
		for l := range rk.layers {
			rk.layers[l] = packLayer(cfg, w, l, rk)
		}
		rk.cls = packRows(rowRange(w.wcls, cfg.Dim, rk.v0, rk.v1), cfg.Dim)
		m.ranks[r] = rk
	}
	m.bar.init(ranks)
	for _, rk := range m.ranks[1:] {
		m.workers.Add(1)
		go m.worker(rk)
	}
	return m, nil
}

// rowRange returns views of rows [r0, r1) of a row-major matrix with cols columns.
func rowRange(mat []float32, cols, r0, r1 int) [][]float32 {
	rows := make([][]float32, 0, r1-r0)
	for i := r0; i < r1; i++ {
		rows = append(rows, mat[i*cols:(i+1)*cols])
	}
	return rows
}

// colRange returns views of columns [c0, c1) of every row of a row-major matrix.
func colRange(mat []float32, rows, cols, c0, c1 int) [][]float32 {
	out := make([][]float32, rows)
	for i := range out {
		out[i] = mat[i*cols+c0 : i*cols+c1]
	}
	return out
}

func packLayer(c Config, w *rawWeights, l int, rk *rank) rankLayer {
	hs, dim, kvd, hid := c.HeadSize(), c.Dim, c.KVDim(), c.HiddenDim
	q := c.Heads * hs
	wq := w.wq[l*q*dim : (l+1)*q*dim]
	wk := w.wk[l*kvd*dim : (l+1)*kvd*dim]
	wv := w.wv[l*kvd*dim : (l+1)*kvd*dim]
	wo := w.wo[l*dim*q : (l+1)*dim*q]
	w1 := w.w1[l*hid*dim : (l+1)*hid*dim]
	w2 := w.w2[l*dim*hid : (l+1)*dim*hid]
	w3 := w.w3[l*hid*dim : (l+1)*hid*dim]

	qkvRows := rowRange(wq, dim, rk.h0*hs, rk.h1*hs)
	qkvRows = append(qkvRows, rowRange(wk, dim, rk.kv0*hs, rk.kv1*hs)...)
	qkvRows = append(qkvRows, rowRange(wv, dim, rk.kv0*hs, rk.kv1*hs)...)
	w13Rows := rowRange(w1, dim, rk.hid0, rk.hid1)
	w13Rows = append(w13Rows, rowRange(w3, dim, rk.hid0, rk.hid1)...)
	return rankLayer{
		qkv: packRows(qkvRows, dim),
		wo:  packRows(colRange(wo, dim, q, rk.h0*hs, rk.h1*hs), (rk.h1-rk.h0)*hs),
		w13: packRows(w13Rows, dim),
		w2:  packRows(colRange(w2, dim, hid, rk.hid0, rk.hid1), rk.hid1-rk.hid0),
	}
}

// Ranks returns the number of tensor-parallel ranks.
func (m *Model) Ranks() int { return len(m.ranks) }

// WeightBytes returns the bytes of weights a forward pass reads once per step
// (all ranks' packed matrices; embeddings and norms excluded).
func (m *Model) WeightBytes() int {
	n := 0
	for _, rk := range m.ranks {
		for i := range rk.layers {
			ly := &rk.layers[i]
			n += ly.qkv.bytes() + ly.wo.bytes() + ly.w13.bytes() + ly.w2.bytes()
		}
		n += rk.cls.bytes()
	}
	return n
}

// Close stops the rank goroutines. It is idempotent; Step must not be called
// after Close.
func (m *Model) Close() {
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		close(m.quit)
		m.workers.Wait()
	})
}

// SetStraggler makes rank sleep perLayer in every layer before its first
// barrier, so the other ranks wait for it (fault injection: a slow device).
// perLayer 0 turns it off; a rank outside [0, Ranks()) is ignored. Safe to
// call concurrently with Step; takes effect at the next layer.
func (m *Model) SetStraggler(rank int, perLayer time.Duration) {
	if perLayer <= 0 || rank < 0 || rank >= len(m.ranks) {
		m.straggler.Store(0)
		return
	}
	m.straggler.Store(uint64(perLayer)<<8 | uint64(rank))
}

func (m *Model) worker(rk *rank) {
	defer m.workers.Done()
	for {
		select {
		case <-m.quit:
			return
		case pl := <-rk.start:
			m.runRank(rk, pl)
			m.stepDone.Done()
		}
	}
}

// barrier is a reusable barrier for the ranks. Waiters spin briefly (a layer
// of decode is tens of microseconds) and then park on a condition variable.
type barrier struct {
	n     int32
	count atomic.Int32
	gen   atomic.Uint32
	mu    sync.Mutex
	cond  sync.Cond
}

func (b *barrier) init(n int) {
	b.n = int32(n)
	b.cond.L = &b.mu
}

// barrierSpins bounds the busy-wait before parking (a few microseconds).
const barrierSpins = 4000

func (b *barrier) wait() {
	g := b.gen.Load()
	if b.count.Add(1) == b.n {
		b.count.Store(0)
		b.mu.Lock()
		b.gen.Add(1)
		b.mu.Unlock()
		b.cond.Broadcast()
		return
	}
	for i := 0; i < barrierSpins; i++ {
		if b.gen.Load() != g {
			return
		}
		if i&255 == 255 {
			runtime.Gosched()
		}
	}
	b.mu.Lock()
	for b.gen.Load() == g {
		b.cond.Wait()
	}
	b.mu.Unlock()
}
