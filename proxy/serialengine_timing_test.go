package proxy

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// inferredSink is shareSink that also counts the records whose queue was
// inferred.
type inferredSink struct {
	shareSink
	inferred int
}

func (s *inferredSink) Emit(r *record.Record) {
	s.shareSink.Emit(r)
	if r.Timeline.Inferred().Has(stages.EngineQueue) {
		s.mu.Lock()
		s.inferred++
		s.mu.Unlock()
	}
}

// BenchmarkUnattributedSerial measures how much of TTFT stays unattributed
// in front of a one-slot engine shaped as Ollama (serialEngine), conc
// clients sending without pause, so at c > 1 all but one wait for the slot
// on every request: over the native API (prefill and decode reported, no
// queue) and over /v1 (nothing reported: only the wait the proxy infers
// from its own requests is split off, the prefill stays unattributed). It
// reports the p50 and p99 of unattributed / TTFT and the share of records
// whose queue was inferred. Each request takes the engine about 60 ms: run
// it with -benchtime 100x.
func BenchmarkUnattributedSerial(b *testing.B) {
	for _, c := range []struct {
		native bool
		conc   int
	}{{true, 1}, {true, 4}, {false, 1}, {false, 4}} {
		name := map[bool]string{true: "native", false: "v1"}[c.native]
		conc := c.conc
		b.Run(fmt.Sprintf("%s/c=%d", name, conc), func(b *testing.B) {
			e := newSerialEngine(c.native, 0)
			e.arrived = nil
			sink := new(inferredSink)
			up := startUpstream(b, e.serve)
			via, client := benchProxy(b, up.url, sink, conc)
			b.ResetTimer()
			path, body := "/v1/chat/completions", chatBody
			if c.native {
				path, body = "/api/chat", `{"model":"m","stream":true,"messages":[]}`
			}
			var wg sync.WaitGroup
			for w := range conc {
				wg.Go(func() {
					for i := w; i < b.N; i += conc {
						if err := postDrain(client, via+path, body); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if len(sink.shares) == 0 {
				b.Fatal("no record with a breakdown")
			}
			slices.Sort(sink.shares)
			q := func(s []float64, p float64) float64 { return s[min(int(p*float64(len(s))), len(s)-1)] }
			b.ReportMetric(100*q(sink.shares, 0.5), "unattr_p50_%")
			b.ReportMetric(100*q(sink.shares, 0.99), "unattr_p99_%")
			b.ReportMetric(100*float64(sink.inferred)/float64(len(sink.shares)), "queue_inferred_%")
			b.ReportMetric(0, "ns/op")
		})
	}
}
