package proxy

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/record"
)

// How long events stay inside the proxy under load. Figures and how to run
// them: BENCHMARKS.md, "Transport and disconnect watching".

// residencySink keeps every record's per-event residencies and, for
// streams, the time blocked on the client.
type residencySink struct {
	mu      sync.Mutex
	resid   []time.Duration
	blocked []time.Duration
	streams int
}

func (s *residencySink) Emit(r *record.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resid = append(s.resid, r.Stream.Residencies()...)
	if r.Stream.ContentEvents > 0 {
		s.blocked = append(s.blocked, r.Stream.Blocked)
		s.streams++
	}
}

func (s *residencySink) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resid, s.blocked, s.streams = s.resid[:0], s.blocked[:0], 0
}

// BenchmarkResidency streams through a real proxy, 64 streams at a time
// (and one at a time, for reference), 50 events each, and reports the
// per-event residency inside the proxy (parsed to handed to the client
// socket) over every event of every record, and the time each stream was
// blocked on its client. One op is one stream; run with -benchtime 640x
// (10 rounds of 64). Upstream, proxy and clients share the process and its
// cores. gap=0: the upstream writes as fast as it can (events arrive
// together, the proxy's worst case); gap=2ms: decode-like pacing.
func BenchmarkResidency(b *testing.B) {
	for _, c := range []struct {
		conc int
		gap  time.Duration
	}{{1, 0}, {64, 0}, {64, 2 * time.Millisecond}} {
		b.Run(fmt.Sprintf("c=%d/events=50/gap=%v", c.conc, c.gap), func(b *testing.B) {
			benchResidency(b, c.conc, 50, c.gap)
		})
	}
}

func benchResidency(b *testing.B, conc, events int, gap time.Duration) {
	up := benchUpstream(b, events, gap)
	sink := &residencySink{}
	via, client := benchProxy(b, up, sink, conc)

	run := func(total int) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range conc {
			wg.Go(func() {
				for next.Add(1) <= int64(total) {
					if _, _, err := streamOnce(client, via); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(2 * conc) // warm: connections, pools, parsers
	waitRecords(sink, 2*conc)
	sink.reset()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	waitRecords(sink, b.N)

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.resid) == 0 {
		b.Fatal("no residencies recorded")
	}
	slices.Sort(sink.resid)
	slices.Sort(sink.blocked)
	b.ReportMetric(float64(len(sink.resid))/float64(sink.streams), "events/stream")
	b.ReportMetric(quantileUS(sink.resid, 0.5), "residency_p50_us")
	b.ReportMetric(quantileUS(sink.resid, 0.99), "residency_p99_us")
	b.ReportMetric(quantileUS(sink.resid, 0.999), "residency_p99.9_us")
	b.ReportMetric(quantileUS(sink.resid, 1), "residency_max_us")
	b.ReportMetric(quantileUS(sink.blocked, 0.5), "blocked_p50_us")
	b.ReportMetric(quantileUS(sink.blocked, 0.99), "blocked_p99_us")
}

// waitRecords waits (up to 5 s) until the sink has seen n streams: records
// are emitted after the client has read the end of the response.
func waitRecords(s *residencySink, n int) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		got := s.streams
		s.mu.Unlock()
		if got >= n {
			return
		}
	}
}
