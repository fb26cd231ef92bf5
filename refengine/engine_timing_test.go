package refengine

import (
	"context"
	"io"
	"testing"
	"time"
)

// BenchmarkChatStreamE2E measures end-to-end streamed chat requests over
// loopback HTTP (16 generated tokens each), in parallel so that continuous
// batching has company. Reports requests/s and generated tokens/s.
func BenchmarkChatStreamE2E(b *testing.B) {
	e := startEngine(b, testConfig())
	body := chatBody("Say something about benchmarks.", `"stream":true,"ignore_eos":true,"max_tokens":16`)
	b.SetParallelism(4) // 4 × GOMAXPROCS clients
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp := e.post(b, context.Background(), "/v1/chat/completions", body)
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/el, "req/s")
	b.ReportMetric(float64(16*b.N)/el, "gen_tok/s")
}
