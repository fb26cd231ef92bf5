package model

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time (user+system, all threads) the process has used.
// On a shared machine wall-clock rates swing with other load; tokens per
// CPU-second does not (for ranks=1 it equals the uncontended wall rate).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Benchmarks of the default model. The machine may be shared: run with
// -count=3 and compare the best runs.

func benchModel(b *testing.B, ranks int) *Model {
	b.Helper()
	m, err := NewSeeded(DefaultConfig(), 1, ranks)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	return m
}

// BenchmarkDecode measures steady-state decode: batch sequences each add one
// token per step, at context lengths between 64 and 320.
func BenchmarkDecode(b *testing.B) {
	for _, ranks := range []int{1, 2} {
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("ranks=%d/batch=%d", ranks, batch), func(b *testing.B) {
				m := benchModel(b, ranks)
				cfg := m.Cfg
				pool := m.NewBlockPool(batch * 24)
				entries := make([]StepEntry, batch)
				reset := func() {
					for i := range entries {
						if entries[i].Seq == nil {
							entries[i].Seq = pool.NewSeq()
							entries[i].Logits = make([]float32, cfg.Vocab)
						}
						pool.Release(entries[i].Seq)
						pool.Reserve(entries[i].Seq, 320)
						entries[i].Tokens = testTokens(64, cfg.Vocab, i)
					}
					m.Step(entries)
					for i := range entries {
						entries[i].Tokens = []int{Sample(entries[i].Logits, 0, 0, nil)}
					}
				}
				reset()
				var sync time.Duration
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if entries[0].Seq.Len() >= 320 {
						b.StopTimer()
						reset()
						b.StartTimer()
					}
					sync += m.Step(entries).Sync
					for j := range entries {
						entries[j].Tokens[0] = Sample(entries[j].Logits, 0, 0, nil)
					}
				}
				el := b.Elapsed().Seconds()
				b.ReportMetric(float64(b.N*batch)/el, "tokens/s")
				b.ReportMetric(float64(b.N*batch)/(cpuTime()-cpu0).Seconds(), "tokens/cpu-s")
				b.ReportMetric(float64(b.N)*float64(m.WeightBytes())/el/1e9, "weightGB/s")
				b.ReportMetric(float64(sync.Microseconds())/float64(b.N), "sync-us/step")
			})
		}
	}
}

// BenchmarkPrefill512 measures a 512-token prompt computed in one step.
func BenchmarkPrefill512(b *testing.B) {
	for _, ranks := range []int{1, 2} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			m := benchModel(b, ranks)
			pool := m.NewBlockPool(40)
			toks := testTokens(512, m.Cfg.Vocab, 1)
			lg := make([]float32, m.Cfg.Vocab)
			s := pool.NewSeq()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				pool.Release(s)
				pool.Reserve(s, len(toks))
				m.Step([]StepEntry{{Seq: s, Tokens: toks, Logits: lg}})
			}
			b.ReportMetric(float64(b.N*len(toks))/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(b.N*len(toks))/(cpuTime()-cpu0).Seconds(), "tokens/cpu-s")
		})
	}
}

// BenchmarkStartup measures building the default model and tokenizer: the
// tokenizer is trained once per iteration, as at the engine's start (the
// weights read the cached copy to encode the corpus).
func BenchmarkStartup(b *testing.B) {
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		cfg := DefaultConfig()
		m, err := NewSeeded(cfg, uint64(i), 2)
		if err != nil {
			b.Fatal(err)
		}
		_ = trainTokenizer(corpus, cfg.Vocab)
		m.Close()
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/start")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/start")
}

// BenchmarkMatmul measures the kernels on an MLP-shaped matrix (768x288):
// rows=1 is decode (bandwidth-bound: weight bytes/s), rows=64 is batched
// (compute-bound: GFLOP/s).
func BenchmarkMatmul(b *testing.B) {
	const n, k = 768, 288
	rng := rand.New(rand.NewPCG(1, 1))
	w := make([][]float32, n)
	for i := range w {
		w[i] = randSlice(rng, k)
	}
	pw := packRows(w, k)
	saved := useAsm
	defer setUseAsm(saved)
	for _, asm := range []bool{false, true} {
		if asm && !saved {
			continue
		}
		for _, rows := range []int{1, 8, 64, 512} {
			name := "go"
			if asm {
				name = "avx2"
			}
			b.Run(fmt.Sprintf("%s/rows=%d", name, rows), func(b *testing.B) {
				setUseAsm(asm)
				x := randSlice(rng, rows*k)
				y := make([]float32, rows*n)
				b.SetBytes(int64(pw.bytes()))
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					matmul(y, n, x, k, rows, &pw)
				}
				el := b.Elapsed().Seconds()
				b.ReportMetric(float64(b.N)*2*float64(rows*n*k)/el/1e9, "GFLOP/s")
				b.ReportMetric(float64(b.N)*2*float64(rows*n*k)/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}
