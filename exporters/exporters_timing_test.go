package exporters

import (
	"io"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// typical is a streamed record with 200 tokens and an engine report.
func typical() *record.Record { return fixtures[0].record() }

// BenchmarkLogEmit measures LogSink.Emit for a typical record: formatting
// on the caller's goroutine plus the hand-off to the writer goroutine
// (writing to io.Discard). Steady state: the record's gaps are already
// sorted after the first iteration; see BenchmarkLogEmitUnsortedGaps.
func BenchmarkLogEmit(b *testing.B) {
	s := NewLogSink(io.Discard, LogOptions{})
	defer s.Close()
	r := typical()
	b.ReportAllocs()
	b.SetBytes(int64(len(line(r))))
	for b.Loop() {
		s.Emit(r)
	}
	b.StopTimer()
	if s.Dropped() > uint64(b.N)/100 {
		b.Logf("dropped %d of %d (writer goroutine starved)", s.Dropped(), b.N)
	}
}

// BenchmarkLogEmitParallel is BenchmarkLogEmit from all Ps at once.
func BenchmarkLogEmitParallel(b *testing.B) {
	s := NewLogSink(io.Discard, LogOptions{})
	defer s.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := typical()
		for pb.Next() {
			s.Emit(r)
		}
	})
}

// BenchmarkLogEmitUnsortedGaps includes the percentile sort of 199
// unsorted gaps, as the first and only Emit of a real record pays it. The
// gaps are restored by a copy of 199 values inside the timed loop (tens of
// nanoseconds); stopping the timer instead would cost more than the sort.
func BenchmarkLogEmitUnsortedGaps(b *testing.B) {
	s := NewLogSink(io.Discard, LogOptions{})
	defer s.Close()
	src := typical()
	orig := slices.Clone(src.Stream.GapValues())
	b.ReportAllocs()
	for b.Loop() {
		copy(src.Stream.GapValues(), orig)
		s.Emit(src)
	}
}

// BenchmarkLogLine is the formatting alone (no queue).
func BenchmarkLogLine(b *testing.B) {
	r := typical()
	l := zerolog.New(io.Discard)
	sc := &scratch{}
	b.ReportAllocs()
	for b.Loop() {
		e := l.Log()
		writeLine(e, r, sc)
		e.Send()
	}
}

// BenchmarkMetricsEmit measures Metrics.Emit for a typical record: a TTFT,
// 8 stage, 199 inter-token, TPOT and e2e observations, counters, and the
// trace id (an exemplar in the first iteration only: the same record
// again is not due one).
func BenchmarkMetricsEmit(b *testing.B) {
	for _, tc := range []struct {
		name    string
		trace   bool
		classic bool
	}{{"exemplar", true, false}, {"no_trace_id", false, false}, {"classic_only", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			opts := testMetricOpts
			opts.ClassicOnly = tc.classic
			m := NewMetrics(prometheus.NewRegistry(), opts)
			r := typical()
			if !tc.trace {
				r.TraceID = record.TraceID{}
			}
			b.ReportAllocs()
			for b.Loop() {
				m.Emit(r)
			}
			b.StopTimer()
			if got := ttftCount(m, r); got != uint64(b.N) {
				b.Fatalf("TTFT count %d after %d emits", got, b.N)
			}
		})
	}
}

// BenchmarkMetricsEmitStream measures Metrics.Emit for one proxied record
// of a 16-token and of a 64-token stream, as the proxy hands them over:
// with a trace id (the proxy gives every request one), an engine report,
// a gap per token and a residency per event. The same record again is not
// due an exemplar; in the _exemplar runs each record ends exemplarEvery
// after the last, so its TTFT and e2e buckets take its trace id.
func BenchmarkMetricsEmitStream(b *testing.B) {
	for _, tc := range []struct {
		tokens   int
		exemplar bool
	}{{16, false}, {64, false}, {16, true}, {64, true}} {
		name := strconv.Itoa(tc.tokens) + "_tokens"
		if tc.exemplar {
			name += "_exemplar"
		}
		b.Run(name, func(b *testing.B) {
			m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
			r := new(record.Record)
			engineReportStream(r, tc.tokens)
			done, _ := r.Timeline.At(stages.Done)
			b.ReportAllocs()
			for b.Loop() {
				if tc.exemplar {
					done += exemplarEvery
					r.Timeline.MarkAt(stages.Done, done)
				}
				m.Emit(r)
			}
			b.StopTimer()
			if got := ttftCount(m, r); got != uint64(b.N) {
				b.Fatalf("TTFT count %d after %d emits", got, b.N)
			}
		})
	}
}

// BenchmarkMetricsEmitParallel is Metrics.Emit from all Ps on one label
// pair, the contended case.
func BenchmarkMetricsEmitParallel(b *testing.B) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := typical()
		for pb.Next() {
			m.Emit(r)
		}
	})
}

// ttftCount reads the TTFT histogram's sample count for r's labels.
func ttftCount(m *Metrics, r *record.Record) uint64 {
	s := m.tuple(m.modelIndex(r.Model), m.upstreamIndex(r.Upstream))
	var pb dto.Metric
	if err := s.ttft.(prometheus.Metric).Write(&pb); err != nil {
		panic(err)
	}
	return pb.GetHistogram().GetSampleCount()
}
