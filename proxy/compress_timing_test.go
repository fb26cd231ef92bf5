package proxy

import (
	"runtime"
	"testing"
)

// BenchmarkEncoderMemory reports the heap one live compressed stream holds
// (after its first event), and the cost of compressing one chat chunk.
func BenchmarkEncoderMemory(b *testing.B) {
	event := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	for _, coding := range []string{CompressGzip, CompressZstd} {
		b.Run(coding, func(b *testing.B) {
			const live = 200
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			pool := &gzipPool
			if coding == CompressZstd {
				pool = &zstdPool
			}
			encs := make([]*encoder, live)
			for i := range encs {
				encs[i] = pool.New().(*encoder) // fresh, not pooled: what a new stream costs
				encs[i].encode(event)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			perStream := float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / live / 1024
			var out int
			b.ResetTimer()
			for range b.N {
				out = len(encs[0].encode(event))
			}
			b.ReportMetric(float64(out), "bytes/event")
			b.ReportMetric(perStream, "KiB/stream")
			runtime.KeepAlive(encs)
		})
	}
}
