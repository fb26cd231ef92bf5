package exporters

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Label values that stand for "not in the configured set" and "none".
const (
	// LabelOther is the model or upstream label of anything not configured
	// in MetricOptions (so a client cannot mint series).
	LabelOther = "other"
	// LabelNone is the upstream label of a request that never got one
	// (rejected by the gateway, no healthy upstream).
	LabelNone = "none"
)

// Histogram buckets, in seconds. Classic buckets are what dashboards and
// alert rules query today; every histogram also has native buckets
// (factor 1.1, about 7% resolution) for scrapers that ask for them.
var (
	// LatencyBuckets cover TTFT and end-to-end time: from a cached, short
	// prompt on a local engine (sub-millisecond through the proxy) to long
	// generations and queueing under overload (minutes). Both 2 and 2.5 s
	// are boundaries, as TTFT objectives of either are common and an
	// objective must sit on a boundary to be counted exactly.
	LatencyBuckets = []float64{
		0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2, 2.5, 5, 10, 20, 30, 60, 120, 300,
	}
	// StageBuckets cover one TTFT stage: proxy stages (gateway, route,
	// transport) live in the tens of microseconds, engine stages up to the
	// TTFT range.
	StageBuckets = []float64{
		0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
		0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
	}
	// TokenBuckets cover inter-token latency and time per output token:
	// a fast decode is 1-20 ms per token, a stall seconds.
	TokenBuckets = []float64{
		0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
		0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10,
	}
	// ResidencyBuckets cover the time one event spends inside the proxy
	// (parsed to flushed): a 1-2.5-5 series from 1 µs to 1 s (19 buckets,
	// steps of 2 to 2.5x), so the microsecond range where a healthy proxy
	// lives is resolved as finely as the millisecond range where a stuck
	// one shows up.
	ResidencyBuckets = []float64{
		0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001,
		0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
		0.25, 0.5, 1,
	}
	// BlockedBuckets cover the time a stream spent waiting for its client
	// to take bytes after the first token, summed over the stream: tens of
	// microseconds (the socket writes of a fast client) to minutes (a
	// client that reads slowly for a whole long generation).
	BlockedBuckets = []float64{
		0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
		0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
	}
	// CancelBuckets cover the time from noticing a client left to closing
	// the upstream connection (the TTFTLensCancelToCloseSlow alert fires
	// over 300 ms).
	CancelBuckets = []float64{
		0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.3, 0.5, 1, 2.5, 10,
	}
)

// MetricOptions configures Metrics. Model and upstream labels take only
// the values listed here, LabelOther and LabelNone, so cardinality is
// bounded by configuration, never by clients.
type MetricOptions struct {
	// Models is the allowlist of model label values; any other model
	// (including an empty one) is counted as LabelOther.
	Models []string
	// Upstreams is the configured upstream names; any other is LabelOther,
	// an empty one LabelNone.
	Upstreams []string
	// Policies is the routing policies' names (gateway.Policies), label
	// values of the cache series; any other is LabelOther.
	Policies []string
	// Version and Revision label ttftlens_build_info.
	Version, Revision string
	// ClassicOnly turns native histograms off. They cost about 3x more
	// per observation (~100 ns vs ~35 ns on the 2-core dev machine) on the
	// histograms observed once per record, whether or not a scraper asks
	// for them; the per-event ones (durationVec) take a record's values at
	// once and cost little more with them.
	ClassicOnly bool
}

// histOpts returns histogram options with classic buckets and, unless
// classicOnly, native histograms (bounded to 160 buckets, reset at most
// hourly).
func histOpts(name, help string, buckets []float64, classicOnly bool) prometheus.HistogramOpts {
	if classicOnly {
		return prometheus.HistogramOpts{Namespace: "ttftlens", Name: name, Help: help, Buckets: buckets}
	}
	return prometheus.HistogramOpts{
		Namespace:                       "ttftlens",
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// series is the children of one (model, upstream) label pair, resolved
// once so Emit does no label lookups.
type series struct {
	ttft        exemplarHistogram
	ttftGate    exemplarGate
	firstAnswer prometheus.Observer
	e2e         exemplarHistogram
	e2eGate     exemplarGate
	stage       [stages.NumStages]prometheus.Observer
	itl         *durationHist
	tpot        prometheus.Observer
	tokens      prometheus.Counter
	reasoning   prometheus.Counter
}

type reqKey struct {
	reason endreason.Reason
	detail endreason.Detail
}

// reqExtraKey is a requests_total child outside the known (reason, detail)
// pairs, on one (model, upstream) tuple.
type reqExtraKey struct {
	reqKey
	mi, ui int
}

// counterRef boxes a counter for an atomic.Pointer.
type counterRef struct{ prometheus.Counter }

// Where a detail can happen, for pre-creating requests_total: the gateway
// rejects a request before it picks an upstream (upstream LabelNone), the
// client or a deadline can end it on either side, and every other detail
// needs an upstream's connection or response. A detail placed wrongly here
// still counts right; only its series is created on first use instead of
// at start (so rate() misses that first increment).
var (
	beforeUpstreamDetails = []endreason.Detail{
		endreason.DetailMissingKey, endreason.DetailInvalidKey, endreason.DetailQuotaExceeded,
		endreason.DetailQuotaUnavailable, endreason.DetailMalformedRequest, endreason.DetailRequestBodyTooLarge, endreason.DetailUnknownModel,
		endreason.DetailInvalidParam, endreason.DetailNoHealthy, endreason.DetailBodyMemoryFull,
		endreason.DetailBodyReadTimeout, endreason.DetailSLOUnmeetable,
	}
	eitherSideDetails = []endreason.Detail{
		endreason.DetailClientClosed, endreason.DetailTTFTDeadline, endreason.DetailTotalDeadline,
		endreason.DetailShutdown, endreason.DetailConnectFailed, endreason.DetailProxyPanic,
	}
)

// Metrics is the Prometheus sink: it turns each record into observations
// of the ttftlens_* series and keeps the in-flight gauge. It is safe for
// concurrent use. Emit does no label hashing and allocates only for
// exemplars (TTFT and end-to-end, when the record has a trace id and a
// bucket it falls in is due one: exemplar.go).
type Metrics struct {
	models    map[string]int // model → index; LabelOther is len(Models)
	upstreams map[string]int // upstream → index; other, none follow
	nUp       int

	ttftVec, e2eVec, tpotVec *prometheus.HistogramVec
	firstAnswerVec, stageVec *prometheus.HistogramVec
	itlVec                   *durationVec
	tokensVec, reasoningVec  *prometheus.CounterVec
	tuples                   []atomic.Pointer[series]
	modelNames, upNames      []string

	requestsVec *prometheus.CounterVec
	reqPairs    []reqKey                     // the known (end_reason, detail) pairs
	reqIndex    map[reqKey]int               // pair → index in reqPairs; read-only after NewMetrics
	requests    []atomic.Pointer[counterRef] // [(mi*nUp+ui)*len(reqPairs) + pair index]
	reqExtra    sync.Map                     // reqExtraKey → prometheus.Counter, pairs outside the table

	inFlight          prometheus.Gauge
	unsplit           []prometheus.Counter // by upstream index
	inconsistent      []prometheus.Counter // by upstream index
	cancelPhase       [endreason.NumPhases]prometheus.Counter
	cancelToClose     prometheus.Observer
	tokensAfterCancel prometheus.Counter
	residency         *durationHist
	blocked           prometheus.Observer
	buffered          []prometheus.Counter // [upstream index*len(kinds) + kind bit]
	drops             *dropCollector
	engineWaste       *engineWasteCollector
	routing           routingSeries
	refusedRequests   reasonCounters[endreason.Refusal]
	refusedConns      reasonCounters[endreason.Refusal]
	connDiscards      reasonCounters[endreason.ConnDiscard]
}

// NewMetrics creates the ttftlens_* series, registers them on reg (it
// panics if they are already registered there) and pre-creates the series
// known in advance at zero, so that rate() and increase() count a series'
// first increment (a counter born at 1 loses it): every stage (and TTFT,
// e2e, ITL, TPOT, tokens) for each configured model plus LabelOther on each
// configured upstream (LabelOther when none is configured), each cancel
// phase, unsplit, inconsistent and buffered for every upstream value.
//
// requests_total is pre-created for every (end_reason, detail) pair that
// can happen on each (model, upstream) tuple, not for the whole product:
// on the tuples above every pair but the gateway's and the front door's own
// rejections, and on upstream LabelNone (a request that never got an
// upstream) only those rejections and the details that can end a request on
// either side (client_closed, ttft_deadline, total_deadline, shutdown,
// connect_failed, proxy_panic). A pair that cannot happen there (upstream_5xx
// without an upstream, missing_api_key with one) would be a series stuck at
// zero. With 3 models and 2 upstreams (4 model values: the 3 and LabelOther)
// that is 4×2×36 + 4×18 = 360 series, where the whole product of 48
// pairs, 4 models and 4 upstream values would be 768. Upstream LabelOther (a name missing
// from MetricOptions.Upstreams) and a detail outside endreason's table are
// created on first use, like the histograms of a tuple not pre-created.
//
// Series: the histograms ttftlens_time_to_first_token_seconds,
// _time_to_first_answer_seconds, _stage_duration_seconds{stage},
// _inter_token_latency_seconds, _time_per_output_token_seconds and
// _e2e_request_duration_seconds, the counters ttftlens_output_tokens_total,
// ttftlens_reasoning_tokens_total and
// ttftlens_requests_total{end_reason, detail}, all labelled {model, upstream};
// ttftlens_requests_in_flight; ttftlens_upstream_unsplit_total{upstream};
// ttftlens_engine_report_inconsistent_total{upstream};
// ttftlens_records_dropped_total{sink}; ttftlens_client_cancel_phase_total{phase};
// ttftlens_cancel_to_close_seconds; ttftlens_tokens_after_cancel_total;
// ttftlens_upstream_tokens_after_cancel_total{upstream} and
// ttftlens_upstream_aborted_requests_total{upstream} (the engines' own
// counts, from EngineWaste);
// ttftlens_event_residency_seconds (one observation per event);
// ttftlens_transport_blocked_seconds (one per streamed request with a first
// token); ttftlens_buffered_streams_total{upstream, kind};
// ttftlens_refused_requests_total{reason} and
// ttftlens_refused_connections_total{reason} (endreason's refusals, each
// pre-created); ttftlens_upstream_conns_discarded_total{reason}
// (endreason's ConnDiscards, each pre-created);
// ttftlens_build_info{version, revision, goversion};
// ttftlens_ttft_prediction_ratio{upstream},
// ttftlens_ttft_slo_probes_total{upstream, met},
// ttftlens_cache_reported_prompt_tokens_total{policy} and
// ttftlens_cached_prompt_tokens_total{policy} (routing.go).
func NewMetrics(reg prometheus.Registerer, opts MetricOptions) *Metrics {
	m := &Metrics{}
	configured := m.indexLabels(opts)
	m.registerTupleSeries(reg, opts.ClassicOnly)
	m.registerProxySeries(reg, opts)
	m.routing.register(reg, m.upNames, opts.Policies, opts.ClassicOnly)
	m.indexRequestPairs()
	m.precreate(configured)
	return m
}

// indexLabels indexes the model and upstream label values opts allow, each
// once, followed by LabelOther (and LabelNone for upstreams), and returns
// how many upstreams are configured.
func (m *Metrics) indexLabels(opts MetricOptions) int {
	m.models = make(map[string]int, len(opts.Models))
	m.upstreams = make(map[string]int, len(opts.Upstreams))
	for _, v := range opts.Models {
		if _, dup := m.models[v]; !dup && v != LabelOther {
			m.models[v] = len(m.modelNames)
			m.modelNames = append(m.modelNames, v)
		}
	}
	m.modelNames = append(m.modelNames, LabelOther)
	for _, v := range opts.Upstreams {
		if _, dup := m.upstreams[v]; !dup && v != LabelOther && v != LabelNone && v != "" {
			m.upstreams[v] = len(m.upNames)
			m.upNames = append(m.upNames, v)
		}
	}
	configured := len(m.upNames)
	m.upNames = append(m.upNames, LabelOther, LabelNone)
	m.nUp = len(m.upNames)
	m.tuples = make([]atomic.Pointer[series], len(m.modelNames)*m.nUp)
	return configured
}

// registerTupleSeries creates and registers the series labelled {model,
// upstream}: the latency histograms, output tokens and requests.
func (m *Metrics) registerTupleSeries(reg prometheus.Registerer, classicOnly bool) {
	mu := []string{"model", "upstream"}
	m.ttftVec = prometheus.NewHistogramVec(histOpts("time_to_first_token_seconds",
		"Proxy-observed time to first token: receipt to the first content event flushed to the client.",
		LatencyBuckets, classicOnly), mu)
	m.firstAnswerVec = prometheus.NewHistogramVec(histOpts("time_to_first_answer_seconds",
		"Time to the first answer token: receipt to the first event carrying answer, not reasoning only, flushed to the client. Equal to TTFT for a model that does not reason first.",
		LatencyBuckets, classicOnly), mu)
	m.e2eVec = prometheus.NewHistogramVec(histOpts("e2e_request_duration_seconds",
		"Time from receipt to the end of the response, for every request.", LatencyBuckets, classicOnly), mu)
	m.stageVec = prometheus.NewHistogramVec(histOpts("stage_duration_seconds",
		"Time to first token split into stages (gateway, route, queue, preparation, prefill, first_decode, unattributed, transport); per request the stages add up to its TTFT.",
		StageBuckets, classicOnly), []string{"stage", "model", "upstream"})
	m.itlVec = newDurationVec(histOpts("inter_token_latency_seconds",
		"Gaps between consecutive content events of a stream, one observation per gap.", TokenBuckets, classicOnly), mu)
	m.tpotVec = prometheus.NewHistogramVec(histOpts("time_per_output_token_seconds",
		"Decode time per output token after the first: (last token - first token) / (tokens - 1).",
		TokenBuckets, classicOnly), mu)
	m.tokensVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "output_tokens_total", Help: "Generated tokens (upstream usage when reported, else content events)."}, mu)
	m.reasoningVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "reasoning_tokens_total", Help: "The part of the output tokens spent reasoning before the answer (upstream usage when reported, else content events carrying reasoning only)."}, mu)
	m.requestsVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "requests_total", Help: "Finished requests by end reason and detail (a closed set, in the README), model and upstream."},
		[]string{"end_reason", "detail", "model", "upstream"})
	reg.MustRegister(m.ttftVec, m.firstAnswerVec, m.e2eVec, m.stageVec, m.itlVec, m.tpotVec, m.tokensVec, m.reasoningVec, m.requestsVec)
}

// registerProxySeries creates and registers the series of the proxy
// itself (in flight, cancellations, residency, buffering, drops, build
// info) and resolves their children for every upstream value and cancel
// phase.
func (m *Metrics) registerProxySeries(reg prometheus.Registerer, opts MetricOptions) {
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ttftlens",
		Name: "requests_in_flight", Help: "Requests received and not yet finished."})
	unsplitVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "upstream_unsplit_total",
		Help: "Requests with a first token whose upstream reported no engine timings, so the upstream window is unattributed."},
		[]string{"upstream"})
	inconsistentVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "engine_report_inconsistent_total",
		Help: "Requests whose engine-reported durations did not fit the window the proxy observed and were clamped."},
		[]string{"upstream"})
	phaseVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "client_cancel_phase_total", Help: "Client cancellations by the phase the request was in."},
		[]string{"phase"})
	cancelToClose := prometheus.NewHistogram(histOpts("cancel_to_close_seconds",
		"Time from noticing a client left to closing the upstream connection.", CancelBuckets, opts.ClassicOnly))
	m.tokensAfterCancel = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "tokens_after_cancel_total", Help: "Content events the upstream still sent after the client left (wasted work)."})
	residency := newDurationVec(histOpts("event_residency_seconds",
		"Time each event spent inside the proxy, parsed to flushed to the client socket; one observation per event.",
		ResidencyBuckets, opts.ClassicOnly), nil)
	blocked := prometheus.NewHistogram(histOpts("transport_blocked_seconds",
		"Per streamed request with a first token, the time the proxy waited for the client to take bytes after the first token (a slow client shows here, not as decode).",
		BlockedBuckets, opts.ClassicOnly))
	bufferedVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "buffered_streams_total",
		Help: "Responses that arrived held back upstream of the proxy, one increment per sign (kind) seen on a response: burst, late_first_token, not_event_stream, content_length, compressed."},
		[]string{"upstream", "kind"})
	m.drops = &dropCollector{desc: prometheus.NewDesc("ttftlens_records_dropped_total",
		"Records a sink dropped instead of blocking the request (full queue, closed sink, write error, panic).",
		[]string{"sink"}, nil)}
	m.engineWaste = &engineWasteCollector{
		tokens: prometheus.NewDesc("ttftlens_upstream_tokens_after_cancel_total",
			"Tokens the upstream's engine generated for requests whose client had left, as the engine counts them (scraped from its /metrics: the reference engine's ttftlens_engine_tokens_after_client_left_total); absent for an engine that does not count them.",
			[]string{"upstream"}, nil),
		aborted: prometheus.NewDesc("ttftlens_upstream_aborted_requests_total",
			"Requests the upstream's engine aborted, as the engine counts them (scraped from its /metrics: vllm:request_success_total{finished_reason=\"abort\"}, sglang:num_aborted_requests_total, the reference engine's ttftlens_engine_aborted_requests_total); absent for an engine that does not count them.",
			[]string{"upstream"}, nil),
		label: func(up string) string { return m.upNames[m.upstreamIndex(up)] },
		last:  map[string][2]int64{},
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ttftlens", Name: "build_info",
		Help: "Always 1; labels say which ttftlens is running.",
		ConstLabels: prometheus.Labels{"version": orUnknown(opts.Version),
			"revision": orUnknown(opts.Revision), "goversion": runtime.Version()}})
	buildInfo.Set(1)
	refusedReqVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "refused_requests_total",
		Help: "Requests refused before they could be recorded, their head too large, malformed, incomplete or not sent in time; each was answered with an error. Apart: idle_preconnect, a connection that sent nothing within the read timeout, closed unanswered."},
		[]string{"reason"})
	refusedConnVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "refused_connections_total",
		Help: "Client connections refused as they were accepted: the proxy's connection cap, or the client address's."},
		[]string{"reason"})
	discardedVec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ttftlens",
		Name: "upstream_conns_discarded_total",
		Help: "Pooled upstream connections closed instead of used again, because something no request asked for arrived on them (bytes past a response's end, while idle, or found right before the next request was written) or their end did; no request read it."},
		[]string{"reason"})
	reg.MustRegister(m.inFlight, unsplitVec, inconsistentVec, phaseVec, cancelToClose,
		m.tokensAfterCancel, residency, blocked, bufferedVec, m.drops, m.engineWaste, buildInfo, refusedReqVec, refusedConnVec, discardedVec)
	m.refusedRequests = newReasonCounters(refusedReqVec, endreason.RequestRefusals())
	m.refusedConns = newReasonCounters(refusedConnVec, endreason.ConnectionRefusals())
	m.connDiscards = newReasonCounters(discardedVec, endreason.ConnDiscards())

	m.cancelToClose = cancelToClose
	m.residency = residency.with()
	m.blocked = blocked
	kinds := record.BufferingKinds()
	for _, name := range m.upNames {
		m.unsplit = append(m.unsplit, unsplitVec.WithLabelValues(name))
		m.inconsistent = append(m.inconsistent, inconsistentVec.WithLabelValues(name))
		for _, k := range kinds {
			m.buffered = append(m.buffered, bufferedVec.WithLabelValues(name, k))
		}
	}
	for p := endreason.PhaseQueued; p < endreason.NumPhases; p++ {
		m.cancelPhase[p] = phaseVec.WithLabelValues(p.String())
	}
}

// indexRequestPairs lists endreason's (reason, detail) pairs, the
// requests_total children created up front or on first use without a map
// lookup by label.
func (m *Metrics) indexRequestPairs() {
	m.reqIndex = make(map[reqKey]int, 64)
	for _, r := range endreason.All() {
		for _, d := range endreason.Details(r) {
			m.reqIndex[reqKey{r, d}] = len(m.reqPairs)
			m.reqPairs = append(m.reqPairs, reqKey{r, d})
		}
	}
	m.requests = make([]atomic.Pointer[counterRef], len(m.tuples)*len(m.reqPairs))
}

// precreate creates at zero the series an operator will look at from the
// start, as NewMetrics says; configured is the number of configured
// upstreams (with none, every upstream is LabelOther).
func (m *Metrics) precreate(configured int) {
	ups := []int{m.nUp - 2}
	if configured > 0 {
		ups = ups[:0]
		for ui := range configured {
			ups = append(ups, ui)
		}
	}
	for mi := range m.modelNames {
		for _, ui := range ups {
			m.tuple(mi, ui)
		}
		for pi, k := range m.reqPairs {
			before, either := slices.Contains(beforeUpstreamDetails, k.detail), slices.Contains(eitherSideDetails, k.detail)
			if !before {
				for _, ui := range ups {
					m.requestCounter(mi, ui, pi)
				}
			}
			if before || either {
				m.requestCounter(mi, m.nUp-1, pi)
			}
		}
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// tuple returns the children for (model index, upstream index), creating
// them on first use. Concurrent first uses may both build; both get the
// same children from the vectors, so the race is harmless.
func (m *Metrics) tuple(mi, ui int) *series {
	p := &m.tuples[mi*m.nUp+ui]
	if s := p.Load(); s != nil {
		return s
	}
	model, up := m.modelNames[mi], m.upNames[ui]
	s := &series{
		ttft:        m.ttftVec.WithLabelValues(model, up).(exemplarHistogram),
		ttftGate:    newExemplarGate(),
		firstAnswer: m.firstAnswerVec.WithLabelValues(model, up),
		e2e:         m.e2eVec.WithLabelValues(model, up).(exemplarHistogram),
		e2eGate:     newExemplarGate(),
		itl:         m.itlVec.with(model, up),
		tpot:        m.tpotVec.WithLabelValues(model, up),
		tokens:      m.tokensVec.WithLabelValues(model, up),
		reasoning:   m.reasoningVec.WithLabelValues(model, up),
	}
	for i := range stages.NumStages {
		s.stage[i] = m.stageVec.WithLabelValues(stages.Stage(i).String(), model, up)
	}
	p.Store(s)
	return s
}

func (m *Metrics) modelIndex(model string) int {
	if i, ok := m.models[model]; ok {
		return i
	}
	return len(m.modelNames) - 1
}

func (m *Metrics) upstreamIndex(up string) int {
	if up == "" {
		return m.nUp - 1
	}
	if i, ok := m.upstreams[up]; ok {
		return i
	}
	return m.nUp - 2
}

// RequestStarted increments ttftlens_requests_in_flight. The proxy calls it
// once at handler entry and RequestEnded once when the record is emitted.
func (m *Metrics) RequestStarted() { m.inFlight.Inc() }

// RequestEnded decrements ttftlens_requests_in_flight.
func (m *Metrics) RequestEnded() { m.inFlight.Dec() }

// RequestRefused counts a request refused before it could be recorded
// (ttftlens_refused_requests_total).
func (m *Metrics) RequestRefused(r endreason.Refusal) { m.refusedRequests.inc(r) }

// ConnectionRefused counts a client connection refused as it was accepted
// (ttftlens_refused_connections_total).
func (m *Metrics) ConnectionRefused(r endreason.Refusal) { m.refusedConns.inc(r) }

// UpstreamConnDiscarded counts a pooled upstream connection closed instead
// of used again (ttftlens_upstream_conns_discarded_total).
func (m *Metrics) UpstreamConnDiscarded(why endreason.ConnDiscard) { m.connDiscards.inc(why) }

// reasonCounters holds one counter per known reason (a refusal, a
// discard); any other is counted as LabelOther, so the label stays
// bounded.
type reasonCounters[R ~string] struct {
	vec   *prometheus.CounterVec
	known map[R]prometheus.Counter // read-only after newReasonCounters
}

func newReasonCounters[R ~string](vec *prometheus.CounterVec, known []R) reasonCounters[R] {
	c := reasonCounters[R]{vec: vec, known: make(map[R]prometheus.Counter, len(known))}
	for _, r := range known {
		c.known[r] = vec.WithLabelValues(string(r))
	}
	return c
}

func (c reasonCounters[R]) inc(r R) {
	if k, ok := c.known[r]; ok {
		k.Inc()
		return
	}
	c.vec.WithLabelValues(LabelOther).Inc()
}

// InFlight returns the in-flight gauge, for callers that prefer to drive it
// themselves.
func (m *Metrics) InFlight() prometheus.Gauge { return m.inFlight }

// requestCounter returns the requests_total child for (model index,
// upstream index, index in reqPairs), creating it on first use. Concurrent
// first uses may both build; both get the same child from the vector.
func (m *Metrics) requestCounter(mi, ui, pi int) prometheus.Counter {
	p := &m.requests[(mi*m.nUp+ui)*len(m.reqPairs)+pi]
	if c := p.Load(); c != nil {
		return c.Counter
	}
	k := m.reqPairs[pi]
	c := &counterRef{m.requestsVec.WithLabelValues(k.reason.String(), string(k.detail), m.modelNames[mi], m.upNames[ui])}
	p.Store(c)
	return c.Counter
}

// requestCounterFor returns the requests_total child for (reason, detail)
// on (model index, upstream index). A detail outside the known set is
// counted as LabelOther, so the label stays bounded even if a new detail
// is added without updating this package.
func (m *Metrics) requestCounterFor(mi, ui int, r endreason.Reason, d endreason.Detail) prometheus.Counter {
	if pi, ok := m.reqIndex[reqKey{r, d}]; ok {
		return m.requestCounter(mi, ui, pi)
	}
	if _, known := d.Reason(); !known {
		d = LabelOther
	}
	k := reqExtraKey{reqKey{r, d}, mi, ui}
	if c, ok := m.reqExtra.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := m.requestsVec.WithLabelValues(r.String(), string(d), m.modelNames[mi], m.upNames[ui])
	m.reqExtra.Store(k, c)
	return c
}

// Emit records r. It does not keep r and never blocks beyond the atomic
// updates of the series. The record's trace id (when set) becomes the
// exemplar of the TTFT and end-to-end buckets it falls in that took none
// within exemplarEvery.
func (m *Metrics) Emit(r *record.Record) {
	mi, ui := m.modelIndex(r.Model), m.upstreamIndex(r.Upstream)
	s := m.tuple(mi, ui)
	m.requestCounterFor(mi, ui, r.Reason, r.Detail).Inc()

	ex := exemplar{trace: r.TraceID, at: recordEnd(r)}
	defer ex.release()
	bd := r.Breakdown()
	if bd.OK {
		ex.observe(s.ttft, s.ttftGate, bd.TTFT.Seconds())
		for i, d := range bd.Stages {
			s.stage[i].Observe(d.Seconds())
		}
		if bd.Unsplit {
			m.unsplit[ui].Inc()
		}
		if bd.Inconsistent {
			m.inconsistent[ui].Inc()
		}
	}
	m.routing.observe(r, ui, &bd)
	if d, ok := record.FirstAnswer(&r.Timeline); ok {
		s.firstAnswer.Observe(d.Seconds())
	}
	if r.Timeline.Has(stages.Done) {
		ex.observe(s.e2e, s.e2eGate, r.E2E().Seconds())
	}
	s.itl.observeAll(r.Stream.GapValues())
	if r.TokensOut > 1 {
		ft, ok1 := r.Timeline.At(stages.FirstToken)
		lt, ok2 := r.Timeline.At(stages.LastToken)
		if ok1 && ok2 && lt >= ft {
			s.tpot.Observe((lt - ft).Seconds() / float64(r.TokensOut-1))
		}
	}
	if r.TokensOut > 0 {
		s.tokens.Add(float64(r.TokensOut))
	}
	if r.ReasoningTokens > 0 {
		s.reasoning.Add(float64(r.ReasoningTokens))
	}
	if r.Reason == endreason.ClientCancel {
		if r.Phase >= endreason.PhaseQueued && r.Phase < endreason.NumPhases {
			m.cancelPhase[r.Phase].Inc()
		}
		m.cancelToClose.Observe(r.CancelToClose.Seconds())
		if r.TokensAfterCancel > 0 {
			m.tokensAfterCancel.Add(float64(r.TokensAfterCancel))
		}
	}
	m.residency.observeAll(r.Stream.Residencies())
	if r.Streaming && r.Timeline.Has(stages.FirstToken) {
		m.blocked.Observe(r.Stream.Blocked.Seconds())
	}
	if b := r.Buffering; b != 0 {
		n := len(record.BufferingKinds())
		for i, c := range m.buffered[ui*n : (ui+1)*n] {
			if b&(1<<i) != 0 {
				c.Inc()
			}
		}
	}
}

// Dropper is a sink that counts the records it dropped.
type Dropper interface {
	Dropped() uint64
}

// TrackDrops exports d's drop count as ttftlens_records_dropped_total{sink}.
// The series appears at zero from this call on. Tracking the same name
// twice replaces the earlier source.
func (m *Metrics) TrackDrops(sink string, d Dropper) { m.drops.add(sink, d) }

// dropCollector reads the drop counts of the tracked sinks at scrape time,
// so sinks need not know about Prometheus.
type dropCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	srcs []dropSource
}

type dropSource struct {
	name string
	d    Dropper
}

func (c *dropCollector) add(name string, d Dropper) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.srcs {
		if c.srcs[i].name == name {
			c.srcs[i].d = d
			return
		}
	}
	c.srcs = append(c.srcs, dropSource{name, d})
}

func (c *dropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *dropCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.srcs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(s.d.Dropped()), s.name)
	}
}

// EngineWaste sets what upstream's engine counts of its work for clients
// that had left, as last scraped from its /metrics: the tokens it generated
// after their client left and the requests it aborted, each below zero when
// the engine does not count it. They are exported as they are, as
// ttftlens_upstream_tokens_after_cancel_total and
// ttftlens_upstream_aborted_requests_total{upstream}: an engine's restart
// shows as a counter reset, and a series appears only once its engine is
// scraped. Upstreams outside MetricOptions.Upstreams are summed into
// LabelOther.
func (m *Metrics) EngineWaste(upstream string, tokensAfterClientLeft, abortedRequests int64) {
	m.engineWaste.set(upstream, [2]int64{tokensAfterClientLeft, abortedRequests})
}

// engineWasteCollector exports the engines' counts last set, by upstream
// label.
type engineWasteCollector struct {
	tokens, aborted *prometheus.Desc
	label           func(upstream string) string
	mu              sync.Mutex
	last            map[string][2]int64 // upstream → tokens after the client left, aborted requests
}

func (c *engineWasteCollector) set(upstream string, counts [2]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last[upstream] = counts
}

func (c *engineWasteCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tokens
	ch <- c.aborted
}

func (c *engineWasteCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sums := map[string]*[2]int64{}
	for up, counts := range c.last {
		label := c.label(up)
		sum := sums[label]
		if sum == nil {
			sum = &[2]int64{-1, -1}
			sums[label] = sum
		}
		for i, v := range counts {
			if v >= 0 {
				sum[i] = max(sum[i], 0) + v
			}
		}
	}
	c.mu.Unlock()
	for label, sum := range sums {
		for i, desc := range [2]*prometheus.Desc{c.tokens, c.aborted} {
			if sum[i] >= 0 {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(sum[i]), label)
			}
		}
	}
}
