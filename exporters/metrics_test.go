package exporters

import (
	"bytes"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

var testMetricOpts = MetricOptions{
	Models:    []string{"llama-3-8b"},
	Upstreams: []string{"vllm-a", "vllm-b"},
	Policies:  []string{"least_request", "round_robin", "least_load", "least_ttft"},
	Version:   "v0.0.0-test",
	Revision:  "abc123",
}

// ourMetrics lists the ttftlens_* families compared against the golden
// exposition (build_info carries the Go version, so it is checked apart).
var ourMetrics = []string{
	"ttftlens_time_to_first_token_seconds",
	"ttftlens_time_to_first_answer_seconds",
	"ttftlens_stage_duration_seconds",
	"ttftlens_requests_total",
	"ttftlens_inter_token_latency_seconds",
	"ttftlens_time_per_output_token_seconds",
	"ttftlens_e2e_request_duration_seconds",
	"ttftlens_output_tokens_total",
	"ttftlens_reasoning_tokens_total",
	"ttftlens_requests_in_flight",
	"ttftlens_upstream_unsplit_total",
	"ttftlens_engine_report_inconsistent_total",
	"ttftlens_records_dropped_total",
	"ttftlens_client_cancel_phase_total",
	"ttftlens_cancel_to_close_seconds",
	"ttftlens_tokens_after_cancel_total",
	"ttftlens_event_residency_seconds",
	"ttftlens_transport_blocked_seconds",
	"ttftlens_buffered_streams_total",
	"ttftlens_refused_requests_total",
	"ttftlens_refused_connections_total",
	"ttftlens_upstream_tokens_after_cancel_total",
	"ttftlens_upstream_aborted_requests_total",
	"ttftlens_ttft_prediction_ratio",
	"ttftlens_ttft_slo_probes_total",
	"ttftlens_cache_reported_prompt_tokens_total",
	"ttftlens_cached_prompt_tokens_total",
}

// emitFixtures returns a registry holding Metrics fed with every fixture,
// plus a log sink's drop count tracked under "log".
func emitFixtures(t *testing.T) (*prometheus.Registry, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testMetricOpts)
	m.TrackDrops("log", constDrops(3))
	m.RequestStarted()
	m.RequestStarted()
	m.RequestEnded()
	for _, f := range allFixtures() {
		m.Emit(f.record())
	}
	m.RequestRefused(endreason.RefusedHeadersTooLarge)
	m.ConnectionRefused(endreason.RefusedPerClientLimit)
	// Engines' own counts: vLLM counts its aborts only; two upstreams not
	// configured, one counting only tokens, are summed into other.
	m.EngineWaste("vllm-a", -1, 4)
	m.EngineWaste("ref-1", 12, 2)
	m.EngineWaste("ref-2", 3, -1)
	return reg, m
}

type constDrops uint64

func (d constDrops) Dropped() uint64 { return uint64(d) }

func TestMetricsLint(t *testing.T) {
	reg, _ := emitFixtures(t)
	reg.MustRegister(NewRegistry()) // Go and process collectors alongside, as served
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsGolden(t *testing.T) {
	reg, _ := emitFixtures(t)
	path := filepath.Join("testdata", "metrics.golden.txt")
	if *update {
		got, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, ourMetrics...)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	defer want.Close()
	if err := testutil.GatherAndCompare(reg, want, ourMetrics...); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(reg, "ttftlens_build_info")
	if err != nil || n != 1 {
		t.Errorf("build_info: %d series, %v", n, err)
	}
}

// TestMetricsPrecreated checks the series that exist before any request.
func TestMetricsPrecreated(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg, testMetricOpts)
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, ourMetrics...)
	if err != nil {
		t.Fatal(err)
	}
	// requests_total: each pair where it can happen (TestMetricsRequestsPlacement
	// checks which); here every end reason has zero series per model and
	// configured upstream.
	for _, r := range endreason.All() {
		for _, up := range testMetricOpts.Upstreams {
			for _, model := range []string{"llama-3-8b", LabelOther} {
				if !bytes.Contains(text, []byte(`",end_reason="`+r.String()+`",model="`+model+`",upstream="`+up+`"} 0`)) {
					t.Errorf("no zero requests_total series for %s on %s/%s", r, model, up)
				}
			}
		}
	}
	for _, s := range []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport"} {
		for _, up := range testMetricOpts.Upstreams {
			for _, model := range []string{"llama-3-8b", LabelOther} {
				want := `ttftlens_stage_duration_seconds_count{model="` + model + `",stage="` + s + `",upstream="` + up + `"} 0`
				if !bytes.Contains(text, []byte(want)) {
					t.Errorf("missing %s", want)
				}
			}
		}
	}
	for _, p := range []string{"queued", "prefill", "decoding"} {
		if !bytes.Contains(text, []byte(`ttftlens_client_cancel_phase_total{phase="`+p+`"} 0`)) {
			t.Errorf("missing cancel phase %s", p)
		}
	}
	for _, k := range record.BufferingKinds() {
		for _, up := range append(testMetricOpts.Upstreams, LabelOther, LabelNone) {
			want := `ttftlens_buffered_streams_total{kind="` + k + `",upstream="` + up + `"} 0`
			if !bytes.Contains(text, []byte(want)) {
				t.Errorf("missing %s", want)
			}
		}
	}
	for _, want := range []string{"ttftlens_transport_blocked_seconds_count 0", "ttftlens_event_residency_seconds_count 0"} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("missing %s", want)
		}
	}
}

// TestMetricsTransport checks the per-event residency (every event, not the
// maximum per request), the blocked time of streams with a first token only,
// and one buffered_streams_total increment per sign.
func TestMetricsTransport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testMetricOpts)
	r := bufferedFixture.record()
	r.Stream.Blocked = 3 * ms
	m.Emit(r)
	m.Emit(fixtureByName(t, "worker_failure_5xx")) // no first token, not streamed
	m.Emit(fixtureByName(t, "deadline_before_first_token"))
	want := `
# HELP ttftlens_buffered_streams_total Responses that arrived held back upstream of the proxy, one increment per sign (kind) seen on a response: burst, late_first_token, not_event_stream, content_length, compressed.
# TYPE ttftlens_buffered_streams_total counter
ttftlens_buffered_streams_total{kind="burst",upstream="none"} 0
ttftlens_buffered_streams_total{kind="burst",upstream="other"} 0
ttftlens_buffered_streams_total{kind="burst",upstream="vllm-a"} 0
ttftlens_buffered_streams_total{kind="burst",upstream="vllm-b"} 1
ttftlens_buffered_streams_total{kind="compressed",upstream="none"} 0
ttftlens_buffered_streams_total{kind="compressed",upstream="other"} 0
ttftlens_buffered_streams_total{kind="compressed",upstream="vllm-a"} 0
ttftlens_buffered_streams_total{kind="compressed",upstream="vllm-b"} 1
ttftlens_buffered_streams_total{kind="content_length",upstream="none"} 0
ttftlens_buffered_streams_total{kind="content_length",upstream="other"} 0
ttftlens_buffered_streams_total{kind="content_length",upstream="vllm-a"} 0
ttftlens_buffered_streams_total{kind="content_length",upstream="vllm-b"} 0
ttftlens_buffered_streams_total{kind="late_first_token",upstream="none"} 0
ttftlens_buffered_streams_total{kind="late_first_token",upstream="other"} 0
ttftlens_buffered_streams_total{kind="late_first_token",upstream="vllm-a"} 0
ttftlens_buffered_streams_total{kind="late_first_token",upstream="vllm-b"} 1
ttftlens_buffered_streams_total{kind="not_event_stream",upstream="none"} 0
ttftlens_buffered_streams_total{kind="not_event_stream",upstream="other"} 0
ttftlens_buffered_streams_total{kind="not_event_stream",upstream="vllm-a"} 0
ttftlens_buffered_streams_total{kind="not_event_stream",upstream="vllm-b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ttftlens_buffered_streams_total"); err != nil {
		t.Error(err)
	}
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "ttftlens_event_residency_seconds", "ttftlens_transport_blocked_seconds")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ttftlens_event_residency_seconds_count 42\n", // every event of the one stream that flushed any
		`ttftlens_event_residency_seconds_bucket{le="2.5e-05"} `,
		`ttftlens_event_residency_seconds_bucket{le="5e-05"} 42` + "\n",
		"ttftlens_transport_blocked_seconds_count 1\n", // the stream with a first token only
		`ttftlens_transport_blocked_seconds_bucket{le="0.0025"} 0` + "\n",
		`ttftlens_transport_blocked_seconds_bucket{le="0.005"} 1` + "\n",
	} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
}

// TestMetricsFirstAnswer: the first answer histogram sits beside TTFT's;
// a model that reasoned first lands later in it, one that did not at its
// TTFT, one that never answered not at all; reasoning tokens are counted.
func TestMetricsFirstAnswer(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	reasoned := reasoningFixture.record()                         // llama-3-8b on vllm-a
	atOnce := fixtureByName(t, "stop_unsplit")                    // other on vllm-a
	unanswered := fixtureByName(t, "deadline_before_first_token") // llama-3-8b on vllm-a
	atOnce.Timeline.MarkAt(stages.FirstAnswer, atOnce.Breakdown().TTFT)
	for _, r := range []*record.Record{reasoned, atOnce, unanswered} {
		m.Emit(r)
	}
	hist := func(vec *prometheus.HistogramVec, model string) (uint64, float64) {
		var d dto.Metric
		if err := vec.WithLabelValues(model, "vllm-a").(prometheus.Histogram).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
	}
	firstAnswer, _ := record.FirstAnswer(&reasoned.Timeline)
	n, fa := hist(m.firstAnswerVec, "llama-3-8b")
	if _, ttft := hist(m.ttftVec, "llama-3-8b"); n != 1 || fa != firstAnswer.Seconds() || !(fa > ttft) {
		t.Errorf("reasoning model: %d first answers, %v s (want 1, %v s, after TTFT %v s)", n, fa, firstAnswer.Seconds(), ttft)
	}
	n, fa = hist(m.firstAnswerVec, LabelOther)
	if _, ttft := hist(m.ttftVec, LabelOther); n != 1 || fa != ttft {
		t.Errorf("model that did not reason: %d first answers, %v s; want 1 at TTFT %v s", n, fa, ttft)
	}
	for model, want := range map[string]float64{"llama-3-8b": 120, LabelOther: 0} {
		if got := testutil.ToFloat64(m.reasoningVec.WithLabelValues(model, "vllm-a")); got != want {
			t.Errorf("%s: %v reasoning tokens, want %v", model, got, want)
		}
	}
}

// TestMetricsCardinality feeds models, upstreams and details nobody
// configured: they must collapse onto LabelOther / LabelNone.
func TestMetricsCardinality(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testMetricOpts)
	before, _ := testutil.GatherAndCount(reg)
	r := fixtures[0].record()
	for i := range 500 {
		r.Model = "client-model-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		r.Upstream = []string{"vllm-a", "vllm-b", "rogue", ""}[i%4]
		r.Detail = endreason.Detail("made_up_detail_" + r.Model)
		m.Emit(r)
	}
	after, _ := testutil.GatherAndCount(reg)
	// New: the "other" model on upstreams "other" and "none" (13 series
	// each: 4 histograms + 8 stages + tokens), and requests_total{detail=
	// "other"} on each of the four (model "other", upstream) tuples.
	if after-before > 40 {
		t.Errorf("500 distinct models added %d series", after-before)
	}
	text, _ := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, ourMetrics...)
	if bytes.Contains(text, []byte("client-model")) || bytes.Contains(text, []byte("made_up")) || bytes.Contains(text, []byte("rogue")) {
		t.Error("a client-supplied value became a label")
	}
	for _, want := range []string{
		`ttftlens_requests_total{detail="other",end_reason="stop",model="other",upstream="none"} 125`,
		`ttftlens_requests_total{detail="other",end_reason="stop",model="other",upstream="other"} 125`,
		`ttftlens_requests_total{detail="other",end_reason="stop",model="other",upstream="vllm-a"} 125`,
		`ttftlens_requests_total{detail="other",end_reason="stop",model="other",upstream="vllm-b"} 125`,
		`ttftlens_output_tokens_total{model="other",upstream="none"} 25000`,
		`ttftlens_output_tokens_total{model="other",upstream="other"} 25000`,
	} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("missing %s", want)
		}
	}
}

// requestsTotal returns the requests_total samples of reg, keyed by their
// labels as exposed ({detail="…",end_reason="…",model="…",upstream="…"}).
func requestsTotal(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "ttftlens_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(l, "ttftlens_requests_total"); ok {
			labels, value, _ := strings.Cut(rest, " ")
			out[labels] = value
		}
	}
	return out
}

func reqLabels(r endreason.Reason, d endreason.Detail, model, up string) string {
	return `{detail="` + string(d) + `",end_reason="` + r.String() + `",model="` + model + `",upstream="` + up + `"}`
}

// TestMetricsRequestsPlacement checks which requests_total series exist at
// zero before any request: every pair that can happen on each (model,
// upstream) tuple the histograms pre-create, and on upstream "none" the
// ones that can happen without an upstream; nothing else (not the whole
// product of pairs, models and upstream values).
func TestMetricsRequestsPlacement(t *testing.T) {
	opts := MetricOptions{Models: []string{"a", "b", "c"}, Upstreams: []string{"u1", "u2"}}
	reg := prometheus.NewRegistry()
	NewMetrics(reg, opts)
	got := requestsTotal(t, reg)

	before := map[endreason.Detail]bool{}
	for _, d := range beforeUpstreamDetails {
		before[d] = true
	}
	either := map[endreason.Detail]bool{}
	for _, d := range eitherSideDetails {
		either[d] = true
	}
	for _, d := range append(slices.Clone(beforeUpstreamDetails), eitherSideDetails...) {
		if _, ok := d.Reason(); !ok {
			t.Errorf("placed detail %q is not in endreason's table", d)
		}
	}
	want := map[string]bool{}
	for _, r := range endreason.All() {
		for _, d := range endreason.Details(r) {
			for _, model := range []string{"a", "b", "c", LabelOther} {
				if !before[d] {
					want[reqLabels(r, d, model, "u1")] = true
					want[reqLabels(r, d, model, "u2")] = true
				}
				if before[d] || either[d] {
					want[reqLabels(r, d, model, LabelNone)] = true
				}
			}
		}
	}
	for l := range want {
		if v, ok := got[l]; !ok || v != "0" {
			t.Errorf("requests_total%s: %q, want 0", l, v)
		}
	}
	for l := range got {
		if !want[l] {
			t.Errorf("requests_total%s pre-created, cannot happen", l)
		}
	}
	// The count the NewMetrics doc comment gives for 3 models × 2 upstreams.
	if len(got) != 360 {
		t.Errorf("%d requests_total series pre-created, the doc comment says 360", len(got))
	}
	// Spot checks of the placement itself.
	for _, l := range []string{
		reqLabels(endreason.WorkerFailure, endreason.DetailUpstream5xx, "a", LabelNone),
		reqLabels(endreason.PolicyBlock, endreason.DetailMissingKey, "a", "u1"),
		reqLabels(endreason.Stop, endreason.DetailStop, "a", LabelOther),
	} {
		if _, ok := got[l]; ok {
			t.Errorf("requests_total%s pre-created", l)
		}
	}

	// No upstream configured: every upstream is "other", pre-created in
	// place of the configured ones.
	reg = prometheus.NewRegistry()
	NewMetrics(reg, MetricOptions{})
	got = requestsTotal(t, reg)
	for _, l := range []string{
		reqLabels(endreason.Stop, endreason.DetailStop, LabelOther, LabelOther),
		reqLabels(endreason.PolicyBlock, endreason.DetailMissingKey, LabelOther, LabelNone),
	} {
		if got[l] != "0" {
			t.Errorf("no upstreams configured: requests_total%s = %q, want 0", l, got[l])
		}
	}
}

// TestMetricsRequestsLabels checks each record lands on its own (end_reason,
// detail, model, upstream) series, including a gateway rejection (no
// upstream) and a pair outside endreason's table.
// labels returns reasons as label values.
func labels[R ~string](rs []R) []string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return s
}

// TestMetricsRefusals checks each refusal (and each upstream connection
// discard) counts on its own series, pre-created at zero, and one outside
// endreason's set counts as other.
func TestMetricsRefusals(t *testing.T) {
	type count func(*Metrics, string)
	request := func(m *Metrics, r string) { m.RequestRefused(endreason.Refusal(r)) }
	connection := func(m *Metrics, r string) { m.ConnectionRefused(endreason.Refusal(r)) }
	discard := func(m *Metrics, r string) { m.UpstreamConnDiscarded(endreason.ConnDiscard(r)) }
	tests := []struct {
		family string
		known  []string
		count  count
	}{
		{"ttftlens_refused_requests_total", labels(endreason.RequestRefusals()), request},
		{"ttftlens_refused_connections_total", labels(endreason.ConnectionRefusals()), connection},
		{"ttftlens_upstream_conns_discarded_total", labels(endreason.ConnDiscards()), discard},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg, testMetricOpts)
			if n, err := testutil.GatherAndCount(reg, tt.family); err != nil || n != len(tt.known) {
				t.Fatalf("%d series pre-created (%v), want %d", n, err, len(tt.known))
			}
			for i, r := range tt.known {
				for range i + 1 {
					tt.count(m, r)
				}
			}
			tt.count(m, "no_such_reason")
			var want strings.Builder
			want.WriteString("# HELP " + tt.family + " " + familyHelp(t, reg, tt.family) + "\n# TYPE " + tt.family + " counter\n")
			for i, r := range tt.known {
				want.WriteString(tt.family + `{reason="` + string(r) + `"} ` + strconv.Itoa(i+1) + "\n")
			}
			want.WriteString(tt.family + `{reason="other"} 1` + "\n")
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), tt.family); err != nil {
				t.Error(err)
			}
		})
	}
}

// familyHelp returns the help text of a registered family.
func familyHelp(t *testing.T, reg *prometheus.Registry, family string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == family {
			return mf.GetHelp()
		}
	}
	t.Fatalf("no family %s", family)
	return ""
}

func TestMetricsRequestsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testMetricOpts)
	emit := func(r endreason.Reason, d endreason.Detail, model, up string) {
		rec := fixtures[0].record()
		rec.Reason, rec.Detail, rec.Model, rec.Upstream = r, d, model, up
		m.Emit(rec)
	}
	emit(endreason.PolicyBlock, endreason.DetailMissingKey, "llama-3-8b", "")
	emit(endreason.PolicyBlock, endreason.DetailMissingKey, "llama-3-8b", "")
	emit(endreason.InvalidRequest, endreason.DetailUnknownModel, "gpt-9", "")
	emit(endreason.WorkerFailure, endreason.DetailUpstream5xx, "llama-3-8b", "vllm-b")
	emit(endreason.WorkerFailure, endreason.DetailUpstream5xx, "llama-3-8b", "rogue")
	emit(endreason.Stop, endreason.DetailUpstream5xx, "llama-3-8b", "vllm-a") // a pair not in the table
	got := requestsTotal(t, reg)
	for l, want := range map[string]string{
		reqLabels(endreason.PolicyBlock, endreason.DetailMissingKey, "llama-3-8b", LabelNone):     "2",
		reqLabels(endreason.InvalidRequest, endreason.DetailUnknownModel, LabelOther, LabelNone):  "1",
		reqLabels(endreason.WorkerFailure, endreason.DetailUpstream5xx, "llama-3-8b", "vllm-b"):   "1",
		reqLabels(endreason.WorkerFailure, endreason.DetailUpstream5xx, "llama-3-8b", "vllm-a"):   "0",
		reqLabels(endreason.WorkerFailure, endreason.DetailUpstream5xx, "llama-3-8b", LabelOther): "1",
		reqLabels(endreason.Stop, endreason.DetailUpstream5xx, "llama-3-8b", "vllm-a"):            "1",
	} {
		if got[l] != want {
			t.Errorf("requests_total%s = %q, want %s", l, got[l], want)
		}
	}
	total := 0
	for _, v := range got {
		n, _ := strconv.Atoi(v)
		total += n
	}
	if total != 6 {
		t.Errorf("requests_total adds up to %d, want 6 (one per record)", total)
	}
}

func TestAdminHandler(t *testing.T) {
	reg, _ := emitFixtures(t)
	h := AdminHandler(reg, map[string]fasthttp.RequestHandler{
		"/debug/requests": func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("[]") },
	})
	get := func(path, accept string) *fasthttp.RequestCtx {
		ctx := new(fasthttp.RequestCtx)
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.SetRequestURI(path)
		if accept != "" {
			ctx.Request.Header.Set("Accept", accept)
		}
		h(ctx)
		return ctx
	}
	if c := get("/health", ""); c.Response.StatusCode() != 200 || string(c.Response.Body()) != "ok\n" {
		t.Errorf("/health: %d %q", c.Response.StatusCode(), c.Response.Body())
	}
	if c := get("/nope", ""); c.Response.StatusCode() != 404 {
		t.Errorf("/nope: %d", c.Response.StatusCode())
	}
	if c := get("/debug/requests", ""); string(c.Response.Body()) != "[]" {
		t.Errorf("extra handler: %q", c.Response.Body())
	}

	c := get("/metrics", "application/openmetrics-text; version=1.0.0; charset=utf-8")
	body := string(c.Response.Body())
	if c.Response.StatusCode() != 200 || !strings.HasPrefix(string(c.Response.Header.ContentType()), "application/openmetrics-text") {
		t.Fatalf("/metrics: %d %s", c.Response.StatusCode(), c.Response.Header.ContentType())
	}
	for _, name := range []string{"ttftlens_time_to_first_token_seconds_bucket", "ttftlens_e2e_request_duration_seconds_bucket"} {
		found := false
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, name) && strings.Contains(l, `# {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"}`) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no exemplar with the trace id on %s", name)
		}
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Error("OpenMetrics body does not end with # EOF")
	}

	c = get("/metrics", "")
	if !strings.HasPrefix(string(c.Response.Header.ContentType()), "text/plain") ||
		!strings.Contains(string(c.Response.Body()), "ttftlens_requests_in_flight 1\n") {
		t.Errorf("text /metrics: %s", c.Response.Header.ContentType())
	}

	// Native histograms are served in the protobuf format when asked for.
	c = get("/metrics", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if ct := string(c.Response.Header.ContentType()); !strings.Contains(ct, "application/vnd.google.protobuf") {
		t.Fatalf("protobuf /metrics served %s", ct)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(c.Response.Body()), expfmt.NewFormat(expfmt.TypeProtoDelim))
	native := false
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			break
		}
		if mf.GetName() != "ttftlens_time_to_first_token_seconds" {
			continue
		}
		for _, mt := range mf.Metric {
			if h := mt.GetHistogram(); h.GetSampleCount() > 0 && len(h.GetPositiveSpan()) > 0 && len(h.GetBucket()) > 0 {
				native = true // both native spans and classic buckets
			}
		}
	}
	if !native {
		t.Error("no native histogram buckets in the protobuf exposition")
	}

	c = new(fasthttp.RequestCtx)
	c.Request.Header.SetMethod("POST")
	c.Request.SetRequestURI("/metrics")
	h(c)
	if c.Response.StatusCode() != 405 {
		t.Errorf("POST /metrics: %d", c.Response.StatusCode())
	}
}

// TestFanoutIsolatesPanics checks a panicking sink loses only its record,
// counted as its drop.
func TestFanoutIsolatesPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, testMetricOpts)
	var after int
	f := NewFanout(
		Named{"boom", sinkFunc(func(*record.Record) { panic("sink bug") })},
		Named{"metrics", m},
		Named{"count", sinkFunc(func(*record.Record) { after++ })},
	)
	f.Track(m)
	r := fixtures[0].record()
	f.Emit(r)
	f.Emit(r)
	if after != 2 {
		t.Errorf("sink after the panicking one saw %d records", after)
	}
	want := `
# HELP ttftlens_records_dropped_total Records a sink dropped instead of blocking the request (full queue, closed sink, write error, panic).
# TYPE ttftlens_records_dropped_total counter
ttftlens_records_dropped_total{sink="boom"} 2
ttftlens_records_dropped_total{sink="count"} 0
ttftlens_records_dropped_total{sink="metrics"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ttftlens_records_dropped_total"); err != nil {
		t.Error(err)
	}
}

type sinkFunc func(*record.Record)

func (f sinkFunc) Emit(r *record.Record) { f(r) }

// TestMetricsExemplarsKeepTheirTraceID: the exemplar label map is reused
// from record to record, so each exemplar must hold its own copy of its
// trace id, not the map's latest.
func TestMetricsExemplarsKeepTheirTraceID(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	a, b := fixtures[0].record(), fixtures[0].record()
	b.Upstream = "vllm-b"
	b.TraceID[0] = 0x11
	for _, r := range []*record.Record{a, b} {
		m.Emit(r)
	}
	for _, r := range []*record.Record{a, b} {
		s := m.tuple(m.modelIndex(r.Model), m.upstreamIndex(r.Upstream))
		for name, o := range map[string]prometheus.ExemplarObserver{"ttft": s.ttft, "e2e": s.e2e} {
			var d dto.Metric
			if err := o.(prometheus.Metric).Write(&d); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, bk := range d.GetHistogram().GetBucket() {
				for _, l := range bk.GetExemplar().GetLabel() {
					got = append(got, l.GetName()+"="+l.GetValue())
				}
			}
			if want := []string{"trace_id=" + r.TraceID.String()}; !slices.Equal(got, want) {
				t.Errorf("%s on %s: exemplars %v, want %v", name, r.Upstream, got, want)
			}
		}
	}
}

// TestMetricsExemplarEvery: a bucket of TTFT or end-to-end takes a
// record's trace id as its exemplar at most once per exemplarEvery of the
// records' own time; a bucket that has none yet takes the first.
func TestMetricsExemplarEvery(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	var recs []*record.Record
	for i, after := range []time.Duration{0, exemplarEvery * 6 / 10, exemplarEvery * 12 / 10} {
		r := fixtures[0].record()
		r.TraceID[0] = byte(i + 1)
		done, _ := r.Timeline.At(stages.Done)
		r.Timeline.MarkAt(stages.Done, done+after) // later, and a longer e2e
		m.Emit(r)
		recs = append(recs, r)
	}
	a, b, c := recs[0], recs[1], recs[2]
	s := m.tuple(m.modelIndex(a.Model), m.upstreamIndex(a.Upstream))
	bucket := func(v float64) float64 { // the upper bound of v's bucket
		if i := sort.SearchFloat64s(LatencyBuckets, v); i < len(LatencyBuckets) {
			return LatencyBuckets[i]
		}
		return math.Inf(1)
	}
	// TTFT: the three in one bucket; b came too soon after a, c did not.
	// e2e: a alone in its bucket; b first in the next, c too soon after b.
	if bucket(a.E2E().Seconds()) == bucket(b.E2E().Seconds()) || bucket(b.E2E().Seconds()) != bucket(c.E2E().Seconds()) {
		t.Fatalf("e2e %v, %v, %v: the test needs a's bucket apart, b and c's shared", a.E2E(), b.E2E(), c.E2E())
	}
	want := map[string]map[float64]string{
		"ttft": {bucket(a.Breakdown().TTFT.Seconds()): c.TraceID.String()},
		"e2e":  {bucket(a.E2E().Seconds()): a.TraceID.String(), bucket(b.E2E().Seconds()): b.TraceID.String()},
	}
	for name, h := range map[string]exemplarHistogram{"ttft": s.ttft, "e2e": s.e2e} {
		var d dto.Metric
		if err := h.(prometheus.Metric).Write(&d); err != nil {
			t.Fatal(err)
		}
		got := map[float64]string{}
		for _, bk := range d.GetHistogram().GetBucket() {
			if ex := bk.GetExemplar(); ex != nil {
				got[bk.GetUpperBound()] = ex.GetLabel()[0].GetValue()
			}
		}
		if !maps.Equal(got, want[name]) {
			t.Errorf("%s exemplars by bucket %v, want %v", name, got, want[name])
		}
	}
}

// TestMetricsRouting: a request routed with a prediction is one
// observation of its predicted / measured ratio (queue to transport) on
// its upstream; its reported cached tokens count under its pool's policy;
// a request whose engine did not report its cache counts in neither.
func TestMetricsRouting(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	routed := routedFixture.record()
	unreported := fixtureByName(t, "stop_engine_report") // tokens_in 512, no cache report
	unreported.Policy = "least_ttft"
	m.Emit(routed)
	m.Emit(unreported)
	bd := routed.Breakdown()
	want := float64(routed.PredictedPastRoute()) / float64(bd.TTFT-bd.Stages[stages.Gateway]-bd.Stages[stages.Route])
	var d dto.Metric
	if err := m.routing.ratio[m.upstreamIndex("vllm-a")].(prometheus.Histogram).Write(&d); err != nil {
		t.Fatal(err)
	}
	if h := d.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != want {
		t.Errorf("prediction ratio: %d observations summing %v, want 1 of %v", h.GetSampleCount(), h.GetSampleSum(), want)
	}
	for policy, want := range map[string][2]float64{"least_ttft": {512, 384}, "least_request": {0, 0}, LabelOther: {0, 0}} {
		pi := m.routing.policies[policy]
		if got := [2]float64{testutil.ToFloat64(m.routing.prompt[pi]), testutil.ToFloat64(m.routing.cached[pi])}; got != want {
			t.Errorf("%s: prompt, cached tokens %v, want %v", policy, got, want)
		}
	}
}

// TestMetricsSLOProbes: a least_ttft probe of a request with a TTFT SLO
// and a prediction (sent past the SLO) counts by whether its first token
// came within the SLO, none counting as missed; a probe without an SLO,
// and one with an SLO but no prediction (a cold model's), count nowhere.
func TestMetricsSLOProbes(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), testMetricOpts)
	ttft := probeFixture.record().Breakdown().TTFT
	for _, tc := range []struct {
		slo                  time.Duration
		unpredicted, noToken bool
	}{
		{slo: ttft},                // met, exactly
		{slo: ttft - 1},            // missed
		{slo: ttft, noToken: true}, // missed: no first token
		{slo: 0},                   // no SLO
		{slo: ttft, unpredicted: true},
	} {
		r := probeFixture.record()
		r.TTFTSLO, r.Predicted = tc.slo, !tc.unpredicted
		if tc.noToken {
			r.Timeline = stages.Timeline{}
		}
		m.Emit(r)
	}
	ui := m.upstreamIndex(probeFixture.record().Upstream)
	if got := [2]float64{testutil.ToFloat64(m.routing.sloProbes[ui][0]), testutil.ToFloat64(m.routing.sloProbes[ui][1])}; got != [2]float64{2, 1} {
		t.Errorf("probes past the SLO (missed, met) %v, want [2 1]", got)
	}
}
