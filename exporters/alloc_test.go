//go:build !race

package exporters

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// TestAllocs pins the allocation budgets of the Emit paths for a typical
// streamed record (200 tokens): the log line and the metrics allocate
// nothing, but for an exemplar (at most one per bucket and exemplarEvery),
// a bounded number per record, never per gap.
func TestAllocs(t *testing.T) {
	r := typical()
	l := zerolog.New(io.Discard)
	sc := &scratch{}
	if n := testing.AllocsPerRun(200, func() {
		e := l.Log()
		writeLine(e, r, sc)
		e.Send()
	}); n > 0 {
		t.Errorf("log line: %v allocs, want 0", n)
	}

	// LogSink.Emit hands a pooled buffer to the writer goroutine, which
	// returns it after writing. testing.AllocsPerRun pins GOMAXPROCS to 1,
	// starving that goroutine, so measure here with it running.
	s := NewLogSink(io.Discard, LogOptions{})
	defer s.Close()
	for range 1000 { // warm the pools up
		s.Emit(r)
	}
	const n = 20000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		s.Emit(r)
	}
	runtime.ReadMemStats(&after)
	if per := float64(after.Mallocs-before.Mallocs) / n; per > 0.05 {
		t.Errorf("LogSink.Emit: %.3f allocs per record, want ~0", per)
	}

	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	m.Emit(r) // first use of the sparse buckets allocates them
	noTrace := typical()
	noTrace.TraceID = record.TraceID{}
	if n := testing.AllocsPerRun(200, func() { m.Emit(noTrace) }); n > 0 {
		t.Errorf("Metrics.Emit without trace id: %v allocs, want 0", n)
	}
	// The same record again: its buckets took their exemplars within
	// exemplarEvery, so it takes none.
	if n := testing.AllocsPerRun(200, func() { m.Emit(r) }); n > 0 {
		t.Errorf("Metrics.Emit with a trace id, no bucket due an exemplar: %v allocs, want 0", n)
	}
	// A record exemplarEvery later each time: TTFT's and e2e's buckets take
	// its trace id, a bounded number of allocations (client_golang's seven
	// per exemplar and its native exemplars' list, the trace id's string),
	// never per gap. Each run's end-to-end time is a second longer, so the
	// native e2e histogram's buckets those times fall in are made first
	// (without a trace id: no exemplar taken); made in the loop, a new
	// bucket's allocations vary with the map's random hash seed, and the
	// count passed the budget about one run in sixty.
	done, _ := r.Timeline.At(stages.Done)
	for i := range 51 { // AllocsPerRun's warm-up run and its 50
		noTrace.Timeline.MarkAt(stages.Done, done+time.Duration(i+1)*exemplarEvery)
		m.Emit(noTrace)
	}
	if n := testing.AllocsPerRun(50, func() {
		done += exemplarEvery
		r.Timeline.MarkAt(stages.Done, done)
		m.Emit(r)
	}); n > 16 {
		t.Errorf("Metrics.Emit with exemplars: %v allocs, want <= 16", n)
	}
}
