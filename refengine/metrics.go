package refengine

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ttftlens/ttftlens/refengine/model"
)

// The engine's Prometheus series, named, typed and bucketed as vLLM's
// (vllm/v1/metrics/loggers.py), each with vLLM's model_name label. They live
// on the engine's own registry, never the global one: the proxy embeds the
// engine in-process, has its own registry, and serves this one separately at
// its admin /engine/metrics.

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

// metrics are the engine's series. Every child is resolved when the engine
// starts, so recording is an atomic update with no label lookup and no
// allocation (the scheduler records per token).
type metrics struct {
	reg *prometheus.Registry

	running, waiting prometheus.Gauge

	ttft, queue, prefill, decode, e2e, itl prometheus.Histogram

	success          map[string]prometheus.Counter // by finish reason, all of finishReasons
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	preemptions      prometheus.Counter
	prefixQueries    prometheus.Counter
	prefixHits       prometheus.Counter

	// Server.Counters reads these two as integers, so they are atomics the
	// registry reads through CounterFuncs at scrape time.
	aborted         atomic.Int64 // requests whose client left before they finished
	tokensAfterGone atomic.Int64 // tokens produced after their client left
}

// newMetrics registers the series for the model named name, whose KV cache
// holds kvBlocks blocks, on a new registry; kvUsage is read at scrape time
// for vllm:kv_cache_usage_perc.
func newMetrics(name string, kvBlocks int, kvUsage func() float64) *metrics {
	lbl := prometheus.Labels{"model_name": name}
	m := &metrics{reg: prometheus.NewRegistry()}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: lbl})
		m.reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: lbl})
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: lbl, Buckets: buckets})
		m.reg.MustRegister(h)
		return h
	}

	m.running = gauge("vllm:num_requests_running", "Number of requests in the running batch.")
	m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be scheduled.")
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vllm:kv_cache_usage_perc", Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: lbl,
	}, kvUsage))
	// vLLM's cache config as it exports it: a gauge at 1 whose labels are
	// the config (log_metrics_info), no model_name; these are the labels a
	// router reads for the cache's size.
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{"block_size": strconv.Itoa(model.BlockSize), "enable_prefix_caching": "True",
			"engine": "0", "num_gpu_blocks": strconv.Itoa(kvBlocks)},
	})
	info.Set(1)
	m.reg.MustRegister(info)
	m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemptions.")
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.generationTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")

	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of finished requests by finished reason.", ConstLabels: lbl,
	}, []string{"finished_reason"})
	m.reg.MustRegister(success)
	m.success = make(map[string]prometheus.Counter, len(finishReasons))
	for _, r := range finishReasons {
		m.success[r] = success.WithLabelValues(r) // every reason exported from the start, at 0
	}

	m.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds (arrival to first token).", ttftBuckets)
	m.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds (arrival to last token).", requestLatencyBuckets)
	m.queue = histogram("vllm:request_queue_time_seconds", "Histogram of time spent in the waiting queue in seconds.", requestLatencyBuckets)
	m.prefill = histogram("vllm:request_prefill_time_seconds", "Histogram of time spent in prefill in seconds (first scheduled to first token).", requestLatencyBuckets)
	m.decode = histogram("vllm:request_decode_time_seconds", "Histogram of time spent in decode in seconds (first to last token).", requestLatencyBuckets)

	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ttftlens_engine_aborted_requests_total", Help: "Requests whose client left before they finished.", ConstLabels: lbl,
		}, func() float64 { return float64(m.aborted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ttftlens_engine_tokens_after_client_left_total", Help: "Tokens generated after the request's client had left.", ConstLabels: lbl,
		}, func() float64 { return float64(m.tokensAfterGone.Load()) }),
	)
	return m
}

func (m *metrics) finished(reason string) {
	if c, ok := m.success[reason]; ok {
		c.Inc()
	}
}

// handler serves the registry in the format the scraper asks for: the text
// format by default, OpenMetrics when asked for (as vLLM's prometheus_client
// serves it), or protobuf.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorHandling: promhttp.ContinueOnError})
}
