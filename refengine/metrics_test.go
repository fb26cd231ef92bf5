package refengine

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposition is a parsed /metrics body, by family name.
type exposition map[string]*dto.MetricFamily

// scrape GETs /metrics the way a plain HTTP client (the proxy's engine-load
// scraper) does, with no Accept header, and parses the text format.
func scrape(t testing.TB, e *testEngine) exposition {
	t.Helper()
	resp, err := e.client.Get(e.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("/metrics Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation) // vLLM's names are legacy-valid (colons included)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// metric returns the series of family name whose labels are exactly
// model_name="ttftlens-ref" plus labels (name, value pairs), or nil.
func (x exposition) metric(t testing.TB, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := x[name]
	if f == nil {
		t.Errorf("no family %s", name)
		return nil
	}
	want := map[string]string{"model_name": "ttftlens-ref"}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range f.GetMetric() {
		got := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) == len(want) && func() bool {
			for k, v := range want {
				if got[k] != v {
					return false
				}
			}
			return true
		}() {
			return m
		}
	}
	t.Errorf("%s has no series with labels %v", name, want)
	return nil
}

// value is a counter's or gauge's value, or a histogram's sample count.
func (x exposition) value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	m := x.metric(t, name, labels...)
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Errorf("%s: neither counter, gauge nor histogram", name)
	return math.NaN()
}

// sum is a histogram's sum of observations.
func (x exposition) sum(t testing.TB, name string) float64 {
	t.Helper()
	return x.metric(t, name).GetHistogram().GetSampleSum()
}

// vLLM's bucket boundaries, copied from vllm/v1/metrics/loggers.py (not from
// metrics.go, so a change there fails here).
var (
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	vllmRequestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// TestMetricsExposition checks the whole /metrics body after one real
// request: exactly the vLLM-named families, with their types, labels and
// bucket boundaries, and the values that request put there.
func TestMetricsExposition(t *testing.T) {
	e := startEngine(t, testConfig())
	resp := e.post(t, context.Background(), "/v1/completions", `{"prompt":"x","max_tokens":3,"ignore_eos":true}`, "X-Request-Id", "met-1")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The truth is stored after the metrics are recorded (finalize), and the
	// client can have the whole body before that.
	var tr Truth
	if !eventually(t, 5*time.Second, func() bool { var ok bool; tr, ok = e.Truth("met-1"); return ok }) {
		t.Fatal("no truth")
	}
	// The scheduler refreshes its free-block count at the end of the step
	// that finished the request, which can come after the truth.
	if !eventually(t, 5*time.Second, func() bool { free, total := e.KVBlocks(); return free == total }) {
		t.Fatal("KV blocks not freed")
	}
	x := scrape(t, e)

	want := map[string]struct {
		typ     dto.MetricType
		buckets []float64
	}{
		"vllm:num_requests_running":                      {typ: dto.MetricType_GAUGE},
		"vllm:num_requests_waiting":                      {typ: dto.MetricType_GAUGE},
		"vllm:kv_cache_usage_perc":                       {typ: dto.MetricType_GAUGE},
		"vllm:num_preemptions_total":                     {typ: dto.MetricType_COUNTER},
		"vllm:prompt_tokens_total":                       {typ: dto.MetricType_COUNTER},
		"vllm:generation_tokens_total":                   {typ: dto.MetricType_COUNTER},
		"vllm:prefix_cache_queries_total":                {typ: dto.MetricType_COUNTER},
		"vllm:prefix_cache_hits_total":                   {typ: dto.MetricType_COUNTER},
		"vllm:request_success_total":                     {typ: dto.MetricType_COUNTER},
		"vllm:time_to_first_token_seconds":               {dto.MetricType_HISTOGRAM, vllmTTFTBuckets},
		"vllm:inter_token_latency_seconds":               {dto.MetricType_HISTOGRAM, vllmITLBuckets},
		"vllm:e2e_request_latency_seconds":               {dto.MetricType_HISTOGRAM, vllmRequestLatencyBuckets},
		"vllm:request_queue_time_seconds":                {dto.MetricType_HISTOGRAM, vllmRequestLatencyBuckets},
		"vllm:request_prefill_time_seconds":              {dto.MetricType_HISTOGRAM, vllmRequestLatencyBuckets},
		"vllm:request_decode_time_seconds":               {dto.MetricType_HISTOGRAM, vllmRequestLatencyBuckets},
		"ttftlens_engine_aborted_requests_total":         {typ: dto.MetricType_COUNTER},
		"ttftlens_engine_tokens_after_client_left_total": {typ: dto.MetricType_COUNTER},
		"vllm:cache_config_info":                         {typ: dto.MetricType_GAUGE},
	}
	for name := range x {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected family %s", name)
		}
	}
	for name, w := range want {
		f := x[name]
		if f == nil {
			t.Errorf("missing family %s", name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s is a %v, want %v", name, f.GetType(), w.typ)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		wantLabels := []string{"model_name"}
		switch name {
		case "vllm:request_success_total":
			wantLabels = []string{"finished_reason", "model_name"}
		case "vllm:cache_config_info": // as vLLM's: the config, no model
			wantLabels = []string{"block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"}
		}
		for _, m := range f.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetName())
				if l.GetName() == "model_name" && l.GetValue() != "ttftlens-ref" {
					t.Errorf("%s: model_name=%q", name, l.GetValue())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, wantLabels) {
				t.Errorf("%s: labels %v, want %v", name, got, wantLabels)
			}
			if w.buckets == nil {
				continue
			}
			var bounds []float64
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), +1) {
					bounds = append(bounds, b.GetUpperBound())
				}
			}
			if !slices.Equal(bounds, w.buckets) {
				t.Errorf("%s: buckets %v, want vLLM's %v", name, bounds, w.buckets)
			}
		}
		if n := len(f.GetMetric()); name != "vllm:request_success_total" && n != 1 {
			t.Errorf("%s: %d series, want 1", name, n)
		}
	}
	var reasons []string
	for _, m := range x["vllm:request_success_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "finished_reason" {
				reasons = append(reasons, l.GetValue())
			}
		}
	}
	slices.Sort(reasons)
	if want := []string{"abort", "content_filter", "error", "length", "stop"}; !slices.Equal(reasons, want) {
		t.Errorf("finished_reason values %v, want %v (all exported from the start)", reasons, want)
	}

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vllm:num_requests_running", nil, 0},
		{"vllm:num_requests_waiting", nil, 0},
		{"vllm:kv_cache_usage_perc", nil, 0},
		{"vllm:num_preemptions_total", nil, 0},
		{"vllm:prompt_tokens_total", nil, float64(tr.PromptTokens)},
		{"vllm:generation_tokens_total", nil, 3},
		{"vllm:request_success_total", []string{"finished_reason", "length"}, 1},
		{"vllm:request_success_total", []string{"finished_reason", "stop"}, 0},
		{"vllm:request_success_total", []string{"finished_reason", "abort"}, 0},
		{"vllm:request_success_total", []string{"finished_reason", "error"}, 0},
		{"vllm:request_success_total", []string{"finished_reason", "content_filter"}, 0},
		{"vllm:time_to_first_token_seconds", nil, 1},
		{"vllm:inter_token_latency_seconds", nil, 2}, // 3 tokens, 2 gaps
		{"vllm:e2e_request_latency_seconds", nil, 1},
		{"vllm:request_queue_time_seconds", nil, 1},
		{"vllm:request_prefill_time_seconds", nil, 1},
		{"vllm:request_decode_time_seconds", nil, 1},
		{"ttftlens_engine_aborted_requests_total", nil, 0},
		{"ttftlens_engine_tokens_after_client_left_total", nil, 0},
	} {
		if got := x.value(t, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The cache's size, where a router reads vLLM's: block_size and
	// num_gpu_blocks.
	_, total := e.KVBlocks()
	for _, m := range x["vllm:cache_config_info"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || labels["block_size"] != "16" || labels["num_gpu_blocks"] != strconv.Itoa(total) {
			t.Errorf("vllm:cache_config_info %v = %v, want block_size 16, num_gpu_blocks %d, at 1", labels, m.GetGauge().GetValue(), total)
		}
	}
	if tr.PromptTokens == 0 {
		t.Error("truth has no prompt tokens")
	}
	// The histograms hold the engine's own measurements of this request.
	for _, c := range []struct {
		name string
		want time.Duration
	}{
		{"vllm:time_to_first_token_seconds", tr.FirstTokenSampled},
		{"vllm:request_queue_time_seconds", tr.Queue},
		{"vllm:request_prefill_time_seconds", tr.Prefill + tr.FirstDecode},
	} {
		if got := x.sum(t, c.name); got != c.want.Seconds() {
			t.Errorf("%s_sum = %v, want the truth's %v", c.name, got, c.want.Seconds())
		}
	}
	if ttft, e2e := x.sum(t, "vllm:time_to_first_token_seconds"), x.sum(t, "vllm:e2e_request_latency_seconds"); !(e2e >= ttft && ttft > 0) {
		t.Errorf("e2e %v, TTFT %v: want 0 < TTFT <= e2e", e2e, ttft)
	}
}

// TestMetricsOpenMetrics: a scraper that asks for OpenMetrics (Prometheus
// does) gets it, with the same series names.
func TestMetricsOpenMetrics(t *testing.T) {
	e := startEngine(t, testConfig())
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q", ct)
	}
	for _, want := range []string{
		"# TYPE vllm:num_requests_waiting gauge\n",
		`vllm:num_requests_waiting{model_name="ttftlens-ref"} 0.0` + "\n",
		`vllm:num_requests_running{model_name="ttftlens-ref"} 0.0` + "\n",
		"# TYPE vllm:request_success counter\n", // OpenMetrics names the family without _total, as vLLM's client does
		`vllm:request_success_total{finished_reason="abort",model_name="ttftlens-ref"} 0.0` + "\n",
		`vllm:time_to_first_token_seconds_count{model_name="ttftlens-ref"} 0` + "\n",
		"# EOF\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("OpenMetrics body lacks %q", want)
		}
	}
}

// TestMetricsRegistryPerEngine: two engines in one process (the proxy embeds
// one; tests run several) each serve only their own series, and neither
// touches the global registry.
func TestMetricsRegistryPerEngine(t *testing.T) {
	a := startEngine(t, testConfig())
	cfg := testConfig()
	cfg.ModelName = "other"
	b := startEngine(t, cfg)
	resp := a.post(t, context.Background(), "/v1/completions", `{"prompt":"x","max_tokens":2,"ignore_eos":true}`, "X-Request-Id", "per-1")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !eventually(t, 5*time.Second, func() bool { _, ok := a.Truth("per-1"); return ok }) {
		t.Fatal("no truth")
	}
	if got := scrape(t, a).value(t, "vllm:generation_tokens_total"); got != 2 {
		t.Errorf("engine a: %v generation tokens, want 2", got)
	}
	for _, m := range scrape(t, b)["vllm:generation_tokens_total"].GetMetric() {
		if v := m.GetCounter().GetValue(); v != 0 || m.GetLabel()[0].GetValue() != "other" {
			t.Errorf("engine b: %v", m)
		}
	}
	global, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range global {
		if strings.HasPrefix(f.GetName(), "vllm:") || strings.HasPrefix(f.GetName(), "ttftlens_engine_") {
			t.Errorf("%s is on the global registry", f.GetName())
		}
	}
}

// TestMetricsRecordingAllocatesNothing: what the scheduler records per token
// and per request is an atomic update, with no allocation.
func TestMetricsRecordingAllocatesNothing(t *testing.T) {
	m := newMetrics("m", 16, func() float64 { return 0 })
	if n := testing.AllocsPerRun(1000, func() {
		m.generationTokens.Inc()
		m.itl.Observe(0.02)
		m.tokensAfterGone.Add(1)
		m.promptTokens.Add(12)
		m.running.Inc()
		m.running.Dec()
		m.waiting.Add(1)
		m.waiting.Sub(1)
		m.ttft.Observe(0.1)
		m.queue.Observe(0.01)
		m.prefill.Observe(0.05)
		m.decode.Observe(0.5)
		m.e2e.Observe(0.6)
		m.finished(finishStop)
	}); n != 0 {
		t.Errorf("%v allocations per recording", n)
	}
}
