package engines

import (
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// loadSeries are the gauges in which engines count their waiting and
// running requests: vLLM's, SGLang's, TGI's and llama.cpp's /metrics.
var loadSeries = []struct {
	name    string
	waiting bool
}{
	{"vllm:num_requests_waiting", true},
	{"vllm:num_requests_running", false},
	{"sglang:num_queue_reqs", true},
	{"sglang:num_running_reqs", false},
	{"tgi_queue_size", true},
	{"tgi_batch_current_size", false},
	{"llamacpp:requests_deferred", true},
	{"llamacpp:requests_processing", false},
}

// ParseLoad reads an engine's waiting and running request counts from its
// Prometheus text exposition, summing each gauge over its label sets (one
// engine may serve several models). A malformed exposition is read up to
// where it breaks. ok is false when no known gauge has a usable value.
func ParseLoad(r io.Reader) (waiting, running int64, ok bool) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, _ := p.TextToMetricFamilies(r) // partial on error
	for _, s := range loadSeries {
		mf := families[s.name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			v, usable := sampleValue(m)
			if !usable {
				continue
			}
			if s.waiting {
				waiting += int64(v)
			} else {
				running += int64(v)
			}
			ok = true
		}
	}
	return waiting, running, ok
}

// sampleValue is a gauge's (or an untyped sample's) value, when it can be a
// count of requests.
func sampleValue(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if v != v || v < 0 || v > 1e12 { // NaN, or not a count of requests
		return 0, false
	}
	return v, true
}
