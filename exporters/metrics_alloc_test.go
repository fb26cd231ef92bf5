//go:build !race

package exporters

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
)

// TestMetricsRequestsAllocs pins requests_total's share of Metrics.Emit at
// zero allocations once a (end_reason, detail, model, upstream) series
// exists, whether it was pre-created (a configured tuple, a gateway
// rejection without an upstream) or created on first use (an upstream
// missing from the configuration).
func TestMetricsRequestsAllocs(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	var recs []*record.Record
	for _, c := range []struct {
		r        endreason.Reason
		d        endreason.Detail
		model, u string
	}{
		{endreason.Stop, endreason.DetailStop, "llama-3-8b", "vllm-a"},
		{endreason.WorkerFailure, endreason.DetailUpstream5xx, "client-made-up", "vllm-b"},
		{endreason.PolicyBlock, endreason.DetailMissingKey, "llama-3-8b", ""},
		{endreason.ClientCancel, endreason.DetailClientClosed, "llama-3-8b", "not-configured"},
	} {
		r := typical()
		r.TraceID = record.TraceID{}
		r.Reason, r.Detail, r.Model, r.Upstream = c.r, c.d, c.model, c.u
		recs = append(recs, r)
		m.Emit(r) // first use of a tuple or of the sparse buckets allocates
	}
	for _, r := range recs {
		if n := testing.AllocsPerRun(200, func() { m.Emit(r) }); n > 0 {
			t.Errorf("Metrics.Emit %s/%s on %q/%q: %v allocs, want 0", r.Reason, r.Detail, r.Model, r.Upstream, n)
		}
	}
}
