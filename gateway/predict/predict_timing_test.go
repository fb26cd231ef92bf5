package predict

import (
	"testing"
	"time"
)

// trainedModels returns n models, each having observed 500 requests of
// the steady series' engine, the i-th slower by i %.
func trainedModels(b *testing.B, n int) []*Model {
	series := generators["steady.jsonl"]()[:500]
	models := make([]*Model, n)
	for i := range models {
		models[i] = New(Config{})
		for _, l := range series {
			o := l.observation()
			o.Parts[Prefill] += o.Parts[Prefill] * time.Duration(i) / 100
			models[i].Observe(o)
		}
	}
	return models
}

var benchLoad = Load{Waiting: 2, EngineKnown: true, InFlight: 5}

// BenchmarkPredict: one upstream's prediction, from every goroutine at once.
func BenchmarkPredict(b *testing.B) {
	m := trainedModels(b, 1)[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p, ok := m.Predict(time.Minute, 1200, Expected{Cached: 300}, benchLoad); !ok || p.Total <= 0 {
				b.Fatalf("prediction %+v, %v", p, ok)
			}
		}
	})
}

// BenchmarkPredict100: a request's choice among 100 upstreams, each
// predicted, from every goroutine at once: the policy's cost per request.
func BenchmarkPredict100(b *testing.B) {
	models := trainedModels(b, 100)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			best, at := time.Duration(0), -1
			for i, m := range models {
				if p, ok := m.Predict(time.Minute, 1200, Expected{Cached: 300}, benchLoad); ok && (at < 0 || p.Total < best) {
					best, at = p.Total, i
				}
			}
			if at != 0 {
				b.Fatalf("chose %d, want the fastest, 0", at)
			}
		}
	})
}

// BenchmarkPredict100Observing is BenchmarkPredict100 with each choice
// followed by an observation on one of the models, as each request's
// record teaches its upstream's.
func BenchmarkPredict100Observing(b *testing.B) {
	models := trainedModels(b, 100)
	o := generators["steady.jsonl"]()[500].observation()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			for _, m := range models {
				m.Predict(time.Minute, 1200, Expected{Cached: 300}, benchLoad)
			}
			i++
			o.End += time.Microsecond
			models[i%100].Observe(o)
		}
	})
}

// BenchmarkObserve: one upstream's records, from every goroutine at once.
func BenchmarkObserve(b *testing.B) {
	m := trainedModels(b, 1)[0]
	o := generators["steady.jsonl"]()[500].observation()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		o := o
		for pb.Next() {
			o.End += time.Microsecond
			m.Observe(o)
		}
	})
}
