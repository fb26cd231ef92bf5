package model

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestBatchedStepMatchesSingle(t *testing.T) {
	withKernels(t, func(t *testing.T) {
		cfg := smallConfig()
		m := newTestModel(t, cfg, 2)
		pool := m.NewBlockPool(64)
		lens := []int{1, 5, 16, 17, 33, 9}
		// Reference: each prompt alone, then 3 greedy decode steps alone.
		want := make([][][]float32, len(lens))
		for i, n := range lens {
			s := pool.NewSeq()
			toks := testTokens(n, cfg.Vocab, i)
			pool.Reserve(s, n+3)
			lg := make([]float32, cfg.Vocab)
			m.Step([]StepEntry{{Seq: s, Tokens: toks, Logits: lg}})
			want[i] = append(want[i], append([]float32(nil), lg...))
			for d := 0; d < 3; d++ {
				m.Step([]StepEntry{{Seq: s, Tokens: []int{Sample(lg, 0, 0, nil)}, Logits: lg}})
				want[i] = append(want[i], append([]float32(nil), lg...))
			}
			pool.Release(s)
		}
		// Batched: all prompts in one step (prefills of different lengths),
		// then decode steps for all sequences together.
		seqs := make([]*Seq, len(lens))
		entries := make([]StepEntry, len(lens))
		for i, n := range lens {
			seqs[i] = pool.NewSeq()
			pool.Reserve(seqs[i], n+3)
			entries[i] = StepEntry{Seq: seqs[i], Tokens: testTokens(n, cfg.Vocab, i), Logits: make([]float32, cfg.Vocab)}
		}
		for d := 0; d <= 3; d++ {
			st := m.Step(entries)
			total := 0
			for i, e := range entries {
				total += len(e.Tokens)
				assertClose(t, "batched logits", e.Logits, want[i][d], 1e-4)
				entries[i].Tokens = []int{Sample(e.Logits, 0, 0, nil)}
			}
			if st.Tokens != total {
				t.Fatalf("Tokens = %d, want %d", st.Tokens, total)
			}
		}
		for _, s := range seqs {
			pool.Release(s)
		}
	})
}

func TestChunkedPrefillMatchesWhole(t *testing.T) {
	cfg := smallConfig()
	m := newTestModel(t, cfg, 1)
	pool := m.NewBlockPool(16)
	toks := testTokens(70, cfg.Vocab, 3)
	assertClose(t, "chunked", prefillLogits(t, m, pool, toks, 13), prefillLogits(t, m, pool, toks, 70), 1e-4)
}

func TestRanksAgree(t *testing.T) {
	cfg := smallConfig() // 3 kv heads over 2 ranks: an uneven split
	toks := testTokens(45, cfg.Vocab, 4)
	var want []float32
	for _, ranks := range []int{1, 2, 3} {
		m := newTestModel(t, cfg, ranks)
		if m.Ranks() != ranks {
			t.Fatalf("Ranks() = %d", m.Ranks())
		}
		got := prefillLogits(t, m, m.NewBlockPool(8), toks, 20)
		if want == nil {
			want = got
			continue
		}
		assertClose(t, "ranks", got, want, 1e-4)
	}
	if _, err := NewSeeded(cfg, 1, cfg.KVHeads+1); err == nil {
		t.Error("NewSeeded accepted more ranks than kv heads")
	}
	if _, err := NewSeeded(cfg, 1, 0); err == nil {
		t.Error("NewSeeded accepted 0 ranks")
	}
}

func TestPrefixCacheHitMatchesFullPrefill(t *testing.T) {
	cfg := smallConfig()
	m := newTestModel(t, cfg, 2)
	pool := m.NewBlockPool(32)
	prompt := testTokens(3*BlockSize+5, cfg.Vocab, 5)
	want := prefillLogits(t, m, pool, prompt, len(prompt))

	// First request computes and publishes the prompt.
	a := pool.NewSeq()
	if got := pool.AttachPrefix(a, prompt); got != 0 {
		t.Fatalf("AttachPrefix on a cold cache = %d", got)
	}
	pool.Reserve(a, len(prompt))
	m.Step([]StepEntry{{Seq: a, Tokens: prompt}})
	pool.Publish(a, prompt)

	// A second request with the same prompt plus a suffix reuses 3 blocks.
	longer := append(append([]int(nil), prompt...), 7, 8, 9)
	b := pool.NewSeq()
	cached := pool.AttachPrefix(b, longer)
	if cached != 3*BlockSize {
		t.Fatalf("AttachPrefix = %d, want %d", cached, 3*BlockSize)
	}
	pool.Reserve(b, len(prompt)-cached)
	lg := make([]float32, cfg.Vocab)
	if st := m.Step([]StepEntry{{Seq: b, Tokens: prompt[cached:], Logits: lg}}); st.Tokens != 5 {
		t.Fatalf("Step after a cache hit computed %d tokens, want 5", st.Tokens)
	}
	assertClose(t, "prefix hit", lg, want, 1e-4)

	// A prompt that is exactly 3 blocks attaches only 2: one token must be computed.
	c := pool.NewSeq()
	if got := pool.AttachPrefix(c, prompt[:3*BlockSize]); got != 2*BlockSize {
		t.Fatalf("AttachPrefix(exact blocks) = %d, want %d", got, 2*BlockSize)
	}
	// A prompt that diverges in block 2 attaches 1 block.
	d := pool.NewSeq()
	div := append([]int(nil), prompt...)
	div[BlockSize+3]++
	if got := pool.AttachPrefix(d, div); got != BlockSize {
		t.Fatalf("AttachPrefix(divergent) = %d, want %d", got, BlockSize)
	}
	for _, s := range []*Seq{a, b, c, d} {
		pool.Release(s)
	}
	if pool.Free() != pool.Total() {
		t.Fatalf("Free = %d after releasing everything, want %d", pool.Free(), pool.Total())
	}
	if pool.Cached() != 3 {
		t.Fatalf("Cached = %d, want 3", pool.Cached())
	}
}

func TestBlockAccounting(t *testing.T) {
	cfg := smallConfig()
	m := newTestModel(t, cfg, 1)
	pool := m.NewBlockPool(4)
	if pool.Total() != 4 || pool.Free() != 4 {
		t.Fatalf("Total/Free = %d/%d", pool.Total(), pool.Free())
	}
	a := pool.NewSeq()
	if !pool.Reserve(a, 2*BlockSize+1) || pool.Free() != 1 || a.Capacity() != 3*BlockSize {
		t.Fatalf("after Reserve(33): Free = %d, Capacity = %d", pool.Free(), a.Capacity())
	}
	if !pool.Reserve(a, 2*BlockSize+1) || pool.Free() != 1 {
		t.Fatal("re-reserving the same room allocated again")
	}
	b := pool.NewSeq()
	if pool.Reserve(b, 2*BlockSize) || pool.Free() != 1 || b.Capacity() != 0 {
		t.Fatal("Reserve beyond the free blocks succeeded or reserved part")
	}
	toks := testTokens(2*BlockSize+1, cfg.Vocab, 6)
	m.Step([]StepEntry{{Seq: a, Tokens: toks}})
	if a.Len() != len(toks) {
		t.Fatalf("Len = %d", a.Len())
	}
	pool.Publish(a, toks) // 2 full blocks become cacheable
	pool.Release(a)
	pool.Release(a) // idempotent
	if a.Len() != 0 || pool.Free() != 4 || pool.Cached() != 2 {
		t.Fatalf("after Release: Len %d Free %d Cached %d", a.Len(), pool.Free(), pool.Cached())
	}

	// Two sequences share the cached blocks; refcounts keep them alive.
	c, d := pool.NewSeq(), pool.NewSeq()
	if pool.AttachPrefix(c, toks) != 2*BlockSize || pool.AttachPrefix(d, toks) != 2*BlockSize {
		t.Fatal("AttachPrefix missed the cache")
	}
	if pool.Free() != 2 {
		t.Fatalf("Free = %d with 2 shared blocks, want 2", pool.Free())
	}
	pool.Release(c)
	if pool.Free() != 2 || pool.Cached() != 2 {
		t.Fatalf("releasing one sharer freed blocks: Free %d", pool.Free())
	}
	pool.Release(d)
	// Reserving everything evicts the cached blocks.
	e := pool.NewSeq()
	if !pool.Reserve(e, 4*BlockSize) || pool.Free() != 0 || pool.Cached() != 0 {
		t.Fatalf("Reserve(all): Free %d Cached %d", pool.Free(), pool.Cached())
	}
	f := pool.NewSeq()
	if pool.AttachPrefix(f, toks) != 0 {
		t.Fatal("evicted blocks still matched")
	}
	pool.Release(e)
}

func TestStepWithoutReservePanics(t *testing.T) {
	m := newTestModel(t, smallConfig(), 1)
	pool := m.NewBlockPool(2)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	m.Step([]StepEntry{{Seq: pool.NewSeq(), Tokens: []int{1}}})
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, shared := range []bool{true, false} {
		cfg := smallConfig()
		cfg.SharedClassifier = shared
		path := filepath.Join(t.TempDir(), "model.bin")
		var buf bytes.Buffer
		if err := writeCheckpoint(&buf, cfg, seededWeights(cfg, 42)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		wantSize := 4 * (7 + cfg.Params() + cfg.MaxSeq*cfg.HeadSize())
		if buf.Len() != wantSize {
			t.Fatalf("checkpoint is %d bytes, want %d", buf.Len(), wantSize)
		}
		if shape, err := CheckpointShape(path); err != nil || shape != cfg {
			t.Fatalf("CheckpointShape: %+v, %v; want %+v", shape, err, cfg)
		}
		loaded, err := LoadCheckpoint(path, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(loaded.Close)
		if loaded.Cfg != cfg {
			t.Fatalf("loaded config %+v, want %+v", loaded.Cfg, cfg)
		}
		m := newTestModel(t, cfg, 1)
		toks := testTokens(20, cfg.Vocab, 7)
		got := prefillLogits(t, loaded, loaded.NewBlockPool(4), toks, 20)
		want := prefillLogits(t, m, m.NewBlockPool(4), toks, 20)
		assertClose(t, "loaded logits", got, want, 1e-5)

		if err := os.WriteFile(path, buf.Bytes()[:buf.Len()-10], 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := LoadCheckpoint(path, 1); err == nil {
			m.Close()
			t.Error("truncated checkpoint loaded without error")
		}
		if _, err := CheckpointShape(path); err == nil {
			t.Error("CheckpointShape accepted a truncated checkpoint")
		}
		if err := os.WriteFile(path, []byte("this is not a checkpoint at all, it is text"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckpointShape(path); err == nil {
			t.Error("CheckpointShape accepted text")
		}
	}
}

func TestSample(t *testing.T) {
	logits := []float32{0.1, 2, -1, 1.9, 0}
	if got := Sample(logits, 0, 0.9, nil); got != 1 {
		t.Fatalf("greedy = %d, want 1", got)
	}
	draw := func(seed uint64, temp, topP float32) []int {
		rng := rand.New(rand.NewPCG(seed, 0))
		out := make([]int, 200)
		for i := range out {
			out[i] = Sample(logits, temp, topP, rng)
		}
		return out
	}
	a, b := draw(9, 1, 0.9), draw(9, 1, 0.9)
	counts := map[int]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed drew different tokens")
		}
		counts[a[i]]++
	}
	// Top-p 0.9 keeps tokens 1, 3, 0 (p ≈ .42, .38, .08, cumulative > .9 only with 0 or 4).
	if counts[2] != 0 {
		t.Errorf("top-p drew a token outside the nucleus: %v", counts)
	}
	if counts[1] == 0 || counts[3] == 0 {
		t.Errorf("top-p never drew a likely token: %v", counts)
	}
	full := map[int]int{}
	for _, v := range draw(10, 5, 1) {
		full[v]++
	}
	if len(full) != len(logits) {
		t.Errorf("hot sampling without top-p did not reach every token: %v", full)
	}
}

func TestStragglerShowsAsSync(t *testing.T) {
	cfg := smallConfig()
	m := newTestModel(t, cfg, 2)
	pool := m.NewBlockPool(4)
	s := pool.NewSeq()
	defer pool.Release(s)
	pool.Reserve(s, 8)
	m.SetStraggler(1, 2*time.Millisecond)
	st := m.Step([]StepEntry{{Seq: s, Tokens: testTokens(4, cfg.Vocab, 8)}})
	if min := time.Duration(cfg.Layers) * 2 * time.Millisecond; st.Sync < min {
		t.Errorf("Sync = %v with a 2ms/layer straggler over %d layers, want >= %v", st.Sync, cfg.Layers, min)
	}
	m.SetStraggler(1, 0)
	st = m.Step([]StepEntry{{Seq: s, Tokens: testTokens(4, cfg.Vocab, 9)}})
	if st.Sync > time.Duration(cfg.Layers)*2*time.Millisecond {
		t.Logf("Sync = %v without a straggler (noisy machine?)", st.Sync)
	}
}

func TestEmptyEntriesAreSkipped(t *testing.T) {
	m := newTestModel(t, smallConfig(), 2)
	if st := m.Step([]StepEntry{{}, {Tokens: nil}}); st.Tokens != 0 || st.Sync != 0 {
		t.Fatalf("empty step: %+v", st)
	}
	if st := m.Step(nil); st.Tokens != 0 {
		t.Fatalf("nil step: %+v", st)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	m, err := NewSeeded(smallConfig(), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
}

func TestDefaultModelIsFinite(t *testing.T) {
	cfg := DefaultConfig()
	m := newTestModel(t, cfg, 2)
	tk := DefaultTokenizer(cfg)
	pool := m.NewBlockPool(8)
	prompt := append([]int{tk.BOS()}, tk.Encode("Once upon a time, there was a little girl")...)
	lg := prefillLogits(t, m, pool, prompt, len(prompt))
	assertClose(t, "self", lg, lg, 0) // fails on NaN/Inf
	var mx, mn float32
	for _, v := range lg {
		mx, mn = max(mx, v), min(mn, v)
	}
	if mx-mn < 1 || mx > 100 {
		t.Errorf("logit range [%v, %v] looks degenerate", mn, mx)
	}
	t.Logf("params %d, logits in [%.2f, %.2f], next %q", cfg.Params(), mn, mx, tk.Decode(prompt[len(prompt)-1], Sample(lg, 0, 0, nil)))
}

// TestEvictionTakesTheTailFirst: a released chain is evicted from its last
// block back, as vLLM's and SGLang's caches evict, so an eviction of a few
// blocks leaves the rest of the prefix to be found.
func TestEvictionTakesTheTailFirst(t *testing.T) {
	cfg := smallConfig()
	m := newTestModel(t, cfg, 1)
	pool := m.NewBlockPool(5)
	toks := testTokens(3*BlockSize+1, cfg.Vocab, 7)
	a := pool.NewSeq()
	if !pool.Reserve(a, len(toks)) {
		t.Fatal("Reserve failed")
	}
	m.Step([]StepEntry{{Seq: a, Tokens: toks}})
	pool.Publish(a, toks) // 3 full blocks cached
	pool.Release(a)
	if pool.Free() != 5 || pool.Cached() != 3 {
		t.Fatalf("after Release: Free %d Cached %d", pool.Free(), pool.Cached())
	}

	// Two blocks are free; a third must be taken from the cache.
	e := pool.NewSeq()
	if !pool.Reserve(e, 3*BlockSize) || pool.Cached() != 2 {
		t.Fatalf("Reserve(3 blocks): Cached %d, want 2", pool.Cached())
	}
	f := pool.NewSeq()
	if got := pool.AttachPrefix(f, toks); got != 2*BlockSize {
		t.Fatalf("after one eviction the prefix matched %d tokens, want %d (the head kept, the tail evicted)", got, 2*BlockSize)
	}
	pool.Release(f)
	pool.Release(e)
}
