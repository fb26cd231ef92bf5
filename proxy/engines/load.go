package engines

import (
	"io"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// EngineMetrics is what an engine's own /metrics says that the proxy uses:
// its load, and its work for clients that had left.
type EngineMetrics struct {
	// Waiting and Running are the requests in its queue and its running
	// batch; Load is false when no known gauge had a usable value.
	Waiting, Running int64
	Load             bool
	// KVCacheUsage is the fraction of its KV cache in use, 0 to 1; -1
	// when it does not report it.
	KVCacheUsage float64
	// CacheTokens is the size of its KV cache in tokens (the smallest of
	// its engine cores'); 0 when it does not report it.
	CacheTokens int64
	// TokensAfterClientLeft counts the tokens it generated for requests
	// whose client had left, AbortedRequests the requests it aborted (a
	// client that left, mostly): cumulative counts, -1 when it does not
	// report them.
	TokensAfterClientLeft, AbortedRequests int64
	// Families counts the metric families read: 0 when the body is not
	// Prometheus text (an HTML page, JSON) or holds no metric.
	Families int
}

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

// kvUsageSeries are the gauges in which engines report the fraction of
// their KV cache in use (1 is full), the first one present counting:
// vLLM's (vllm/v1/metrics/loggers.py; the gpu_ name is the one it
// deprecated for it), SGLang's token usage (its scheduler's used tokens
// over the KV pool's size) and llama.cpp's (servers before it was dropped
// from /metrics). TGI exports none.
var kvUsageSeries = []string{
	"vllm:kv_cache_usage_perc",
	"vllm:gpu_cache_usage_perc",
	"sglang:token_usage",
	"llamacpp:kv_cache_usage_ratio",
}

// The series in which engines report their KV cache's size: vLLM's
// vllm:cache_config_info, a gauge set to 1 whose labels are its
// CacheConfig (vllm/v1/metrics/loggers.py, log_metrics_info), among them
// block_size and num_gpu_blocks, one label set an engine core; SGLang's
// sglang:max_total_num_tokens, its KV pool's tokens
// (python/sglang/srt/metrics/collector.py). TGI and llama.cpp export none.
const (
	vllmCacheConfig  = "vllm:cache_config_info"
	sglangCacheTotal = "sglang:max_total_num_tokens"
)

// counterSeries is a counter an engine exports, restricted to the samples
// with label (when set) equal to value.
type counterSeries struct {
	name, label, value string
}

var (
	// tokensAfterLeftSeries: the reference engine's count. No other engine
	// counts what it generated after its client left.
	tokensAfterLeftSeries = []counterSeries{
		{name: "ttftlens_engine_tokens_after_client_left_total"},
	}
	// abortedSeries, the first one an engine exports: the reference
	// engine's own count (it also exports vLLM's), vLLM's finished requests
	// whose finish reason is abort (vllm/v1/metrics/loggers.py), SGLang's
	// aborted requests (python/sglang/srt/metrics/collector.py).
	abortedSeries = []counterSeries{
		{name: "ttftlens_engine_aborted_requests_total"},
		{name: "vllm:request_success_total", label: "finished_reason", value: "abort"},
		{name: "sglang:num_aborted_requests_total"},
	}
)

// ParseMetrics reads an engine's Prometheus text exposition, summing each
// series over its label sets (one engine may serve several models, or run
// several engine cores). A malformed exposition is read up to where it
// breaks.
func ParseMetrics(r io.Reader) EngineMetrics {
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, _ := p.TextToMetricFamilies(r) // partial on error
	em := EngineMetrics{Families: len(families)}
	for _, s := range loadSeries {
		mf := families[s.name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			v, usable := countValue(m, false)
			if !usable {
				continue
			}
			if s.waiting {
				em.Waiting += int64(v)
			} else {
				em.Running += int64(v)
			}
			em.Load = true
		}
	}
	em.KVCacheUsage = kvUsage(families)
	em.CacheTokens = cacheTokens(families)
	em.TokensAfterClientLeft = firstCounter(families, tokensAfterLeftSeries)
	em.AbortedRequests = firstCounter(families, abortedSeries)
	return em
}

// kvUsage is the first of kvUsageSeries with a usable sample: the largest
// over its label sets (the fullest cache of an engine running several
// engine cores), at most 1; -1 when none is reported.
func kvUsage(families map[string]*dto.MetricFamily) float64 {
	for _, name := range kvUsageSeries {
		mf := families[name]
		if mf == nil {
			continue
		}
		usage := -1.0
		for _, m := range mf.GetMetric() {
			if v, usable := countValue(m, false); usable {
				usage = max(usage, min(v, 1))
			}
		}
		if usage >= 0 {
			return usage
		}
	}
	return -1
}

// cacheTokens is the KV cache's size in tokens, the smallest over the
// engine cores that report it (a prompt is cached in one core's), from
// vLLM's cache config (block_size × num_gpu_blocks; "None" before the
// engine has sized its cache) or SGLang's pool size; 0 when neither says.
func cacheTokens(families map[string]*dto.MetricFamily) int64 {
	var size int64
	take := func(v int64) {
		if v > 0 && (size == 0 || v < size) {
			size = v
		}
	}
	if mf := families[vllmCacheConfig]; mf != nil {
		for _, m := range mf.GetMetric() {
			block, err1 := strconv.ParseInt(labelValue(m, "block_size"), 10, 64)
			blocks, err2 := strconv.ParseInt(labelValue(m, "num_gpu_blocks"), 10, 64)
			if err1 == nil && err2 == nil && block > 0 && blocks > 0 && blocks <= 1e12/block {
				take(block * blocks)
			}
		}
	}
	if size == 0 {
		if mf := families[sglangCacheTotal]; mf != nil {
			for _, m := range mf.GetMetric() {
				if v, usable := countValue(m, false); usable {
					take(int64(v))
				}
			}
		}
	}
	return size
}

// firstCounter is the sum of the first of series present with a usable
// sample, -1 when none is.
func firstCounter(families map[string]*dto.MetricFamily, series []counterSeries) int64 {
	for _, s := range series {
		mf := families[s.name]
		if mf == nil {
			continue
		}
		var sum int64
		found := false
		for _, m := range mf.GetMetric() {
			if s.label != "" && labelValue(m, s.label) != s.value {
				continue
			}
			if v, usable := countValue(m, true); usable {
				sum += int64(v)
				found = true
			}
		}
		if found {
			return sum
		}
	}
	return -1
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// countValue is the value of a counter's sample (a gauge's when counter is
// false), or of an untyped one (an exposition without TYPE lines), when it
// can be a count.
func countValue(m *dto.Metric, counter bool) (float64, bool) {
	var v float64
	switch {
	case counter && m.Counter != nil:
		v = m.Counter.GetValue()
	case !counter && m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if v != v || v < 0 || v > 1e12 { // NaN, or not a count
		return 0, false
	}
	return v, true
}
