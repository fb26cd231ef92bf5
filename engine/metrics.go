package engine

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// The Prometheus text exposition is written by hand: the module cannot pull
// client_golang's dependencies (client_model, common, procfs) offline, and
// the few series here need nothing more than atomics and a mutex.

// Bucket boundaries (seconds) follow vLLM's loggers.py.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// finishReasons is the closed label set of vllm:request_success_total.
var finishReasons = []string{finishStop, finishLength, finishAbort, finishError, finishContentFilter}

// histogram is a fixed-bucket Prometheus histogram safe for concurrent use.
type histogram struct {
	mu      sync.Mutex
	bounds  []float64
	counts  []uint64 // per bucket (not cumulative); last = +Inf
	sum     float64
	samples uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	if math.IsNaN(v) {
		return
	}
	i := len(h.bounds)
	for j, b := range h.bounds {
		if v <= b {
			i = j
			break
		}
	}
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.samples++
	h.mu.Unlock()
}

// metrics are the engine's Prometheus series, vLLM-named, with one
// model_name label (and finished_reason where vLLM has it).
type metrics struct {
	model string

	running, waiting atomic.Int64

	ttft, queue, prefill, decode, e2e, itl *histogram

	success          map[string]*atomic.Int64 // by finish reason
	promptTokens     atomic.Int64
	generationTokens atomic.Int64
	iterationTokens  atomic.Int64
	preemptions      atomic.Int64
	prefixQueries    atomic.Int64
	prefixHits       atomic.Int64
	aborted          atomic.Int64 // requests whose client left before they finished
	tokensAfterGone  atomic.Int64 // tokens produced after their client left
	kvUsage          func() float64
}

func newMetrics(model string) *metrics {
	m := &metrics{
		model:   model,
		ttft:    newHistogram(ttftBuckets),
		queue:   newHistogram(requestLatencyBuckets),
		prefill: newHistogram(requestLatencyBuckets),
		decode:  newHistogram(requestLatencyBuckets),
		e2e:     newHistogram(requestLatencyBuckets),
		itl:     newHistogram(itlBuckets),
		success: make(map[string]*atomic.Int64, len(finishReasons)),
	}
	for _, r := range finishReasons {
		m.success[r] = new(atomic.Int64)
	}
	return m
}

func (m *metrics) finished(reason string) {
	if c, ok := m.success[reason]; ok {
		c.Add(1)
	}
}

// ServeHTTP writes the text exposition format (version 0.0.4).
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(m.appendText(nil))
}

func (m *metrics) appendText(b []byte) []byte {
	lbl := `model_name="` + escapeLabel(m.model) + `"`
	head := func(name, typ, help string) {
		b = append(b, "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, help...)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, typ...)
		b = append(b, '\n')
	}
	sample := func(name, labels string, v float64) {
		b = append(b, name...)
		b = append(b, '{')
		b = append(b, labels...)
		b = append(b, "} "...)
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	scalar := func(name, typ, help string, v float64) {
		head(name, typ, help)
		sample(name, lbl, v)
	}
	hist := func(name, help string, h *histogram) {
		head(name, "histogram", help)
		h.mu.Lock()
		var cum uint64
		for i, bound := range h.bounds {
			cum += h.counts[i]
			sample(name+"_bucket", lbl+`,le="`+strconv.FormatFloat(bound, 'g', -1, 64)+`"`, float64(cum))
		}
		cum += h.counts[len(h.bounds)]
		sample(name+"_bucket", lbl+`,le="+Inf"`, float64(cum))
		sample(name+"_sum", lbl, h.sum)
		sample(name+"_count", lbl, float64(h.samples))
		h.mu.Unlock()
	}

	scalar("vllm:num_requests_running", "gauge", "Number of requests in the running batch.", float64(m.running.Load()))
	scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be scheduled.", float64(m.waiting.Load()))
	kv := 0.0
	if m.kvUsage != nil {
		kv = m.kvUsage()
	}
	scalar("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv)
	scalar("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.", float64(m.preemptions.Load()))
	scalar("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", float64(m.promptTokens.Load()))
	scalar("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", float64(m.generationTokens.Load()))
	scalar("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(m.prefixQueries.Load()))
	scalar("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(m.prefixHits.Load()))

	head("vllm:request_success_total", "counter", "Count of finished requests by finished reason.")
	for _, r := range finishReasons {
		sample("vllm:request_success_total", lbl+`,finished_reason="`+r+`"`, float64(m.success[r].Load()))
	}

	hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds (arrival to first token).", m.ttft)
	hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl)
	hist("vllm:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds (arrival to last token).", m.e2e)
	hist("vllm:request_queue_time_seconds", "Histogram of time spent in the waiting queue in seconds.", m.queue)
	hist("vllm:request_prefill_time_seconds", "Histogram of time spent in prefill in seconds (first scheduled to first token).", m.prefill)
	hist("vllm:request_decode_time_seconds", "Histogram of time spent in decode in seconds (first to last token).", m.decode)

	scalar("ttftlens_engine_aborted_requests_total", "counter", "Requests whose client left before they finished.", float64(m.aborted.Load()))
	scalar("ttftlens_engine_tokens_after_client_left_total", "counter", "Tokens generated after the request's client had left.", float64(m.tokensAfterGone.Load()))
	return b
}

func escapeLabel(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			out = append(out, `\\`...)
		case '"':
			out = append(out, `\"`...)
		case '\n':
			out = append(out, `\n`...)
		default:
			out = append(out, c)
		}
	}
	return string(out)
}
