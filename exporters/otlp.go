package exporters

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// OTLPEnabled reports whether the environment asks for trace export: an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT) and the SDK is not disabled
// (OTEL_SDK_DISABLED=true) nor the traces exporter set to "none"
// (OTEL_TRACES_EXPORTER). getenv is os.Getenv outside tests.
func OTLPEnabled(getenv func(string) string) bool {
	if getenv("OTEL_SDK_DISABLED") == "true" || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// OTLPOptions configures an OTLPSink. The zero value is ready: the
// exporter's endpoint, headers, timeout and compression come from the
// standard OTEL_EXPORTER_OTLP_* and OTEL_EXPORTER_OTLP_TRACES_* variables,
// batching from OTEL_BSP_*, the resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (all read by the SDK) over our defaults (see
// otlpResource), and the sampler from OTEL_TRACES_SAMPLER (default: every
// request).
type OTLPOptions struct {
	// QueueSize bounds the records waiting to become spans (default 2048).
	// A record that does not fit is dropped and counted.
	QueueSize int
	// ServiceVersion is the resource's service.version ("" = not set).
	ServiceVersion string
	// HTTPOptions are added after the environment's settings (tests point
	// the exporter at their endpoint and shorten its timeouts this way).
	HTTPOptions []otlptracehttp.Option
	// Exporter replaces the OTLP/HTTP exporter (nil = OTLP/HTTP). With it,
	// engine spans are not forwarded (Forward drops and counts them).
	Exporter sdktrace.SpanExporter
	// BatchOptions are added to the batch span processor's options.
	BatchOptions []sdktrace.BatchSpanProcessorOption
}

// OTLPSink turns every record into a trace: one SERVER span
// for the request, continuing the caller's trace, with a child span per
// TTFT stage and one for decoding, all on the request's own clock. See
// docs/traces.md for the layout and the attributes.
//
// Emit copies the record (record.Record.CopyTo) and hands the copy to a bounded
// queue without blocking; one goroutine turns queued records into spans
// through the OpenTelemetry SDK, whose batch span processor sends them
// with the OTLP/HTTP exporter. A record the queue cannot take is dropped
// and counted, and so is a record whose request span the exporter failed
// to deliver (Dropped), so exporting never blocks a request and never
// loses the count.
//
// The bounded, non-blocking queue is ours rather than the SDK's: the batch
// processor's own drop count is not exposed, so the processor is set to
// block — it blocks only the converting goroutine, never Emit.
//
// An OTLPSink is safe for concurrent use. Close flushes and stops it.
type OTLPSink struct {
	mu     sync.RWMutex // Emit holds it shared; Close exclusively to close queue
	closed bool
	queue  chan kept
	done   chan struct{}

	stopping atomic.Bool // Close gave up waiting: remaining records are dropped
	dropped  atomic.Uint64

	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	exp    *countingExporter
	fwd    *forwarder // nil with OTLPOptions.Exporter
	fwdOff atomic.Uint64
}

// otlpResource is the resource every span of this process carries:
// service.name "ttftlens", service.version when known, and
// service.instance.id, a random UUID (version 4) per process, as the
// OpenTelemetry semantic conventions recommend when a service has no
// inherent unique id, so that replicas' spans never collide. The
// environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) overrides any
// of them.
func otlpResource(ctx context.Context, version string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "ttftlens")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// Later options win: WithService's generic service.name gives way to
	// ours, and ours to the environment's.
	res, err := resource.New(ctx, resource.WithService(), resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, err
	}
	return res, nil
}

// NewOTLPSink builds the exporter and the tracer provider and starts the
// converting goroutine; call Close to stop it.
func NewOTLPSink(ctx context.Context, opts OTLPOptions) (*OTLPSink, error) {
	if opts.QueueSize <= 0 {
		opts.QueueSize = 2048
	}
	exp := opts.Exporter
	var fwd *forwarder
	if exp == nil {
		client := otlptracehttp.NewClient(opts.HTTPOptions...)
		e, err := otlptrace.New(ctx, client)
		if err != nil {
			return nil, err
		}
		exp, fwd = e, newForwarder(client)
	}
	res, err := otlpResource(ctx, opts.ServiceVersion)
	if err != nil {
		return nil, err
	}
	counting := &countingExporter{SpanExporter: exp}
	bsp := sdktrace.NewBatchSpanProcessor(counting, append([]sdktrace.BatchSpanProcessorOption{sdktrace.WithBlocking()}, opts.BatchOptions...)...)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(recordIDs{}),
		sdktrace.WithSpanProcessor(bsp),
	)
	s := &OTLPSink{
		queue:  make(chan kept, opts.QueueSize),
		done:   make(chan struct{}),
		tp:     tp,
		tracer: tp.Tracer("github.com/ttftlens/ttftlens/exporters"),
		exp:    counting,
		fwd:    fwd,
	}
	go s.run()
	return s, nil
}

// Emit queues a copy of r for export, or drops and counts it when the
// queue is full or the sink closed. It never blocks and does not keep r;
// it sorts r's inter-token gaps in place (stages.Stream.Gaps).
func (s *OTLPSink) Emit(r *record.Record) {
	k := keep(r)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		s.dropped.Add(1)
		return
	}
	select {
	case s.queue <- k:
	default:
		s.dropped.Add(1)
	}
	s.mu.RUnlock()
}

// Forward sends spans received from engines on to the destination of the
// sink's own, unchanged (see forwarder). It never blocks and keeps rs.
func (s *OTLPSink) Forward(rs []*tracepb.ResourceSpans) {
	if s.fwd == nil {
		s.fwdOff.Add(uint64(countSpans(rs)))
		return
	}
	s.fwd.Forward(rs)
}

// Describe implements prometheus.Collector: the forwarded engine spans.
func (s *OTLPSink) Describe(ch chan<- *prometheus.Desc) {
	ch <- descForwarded
	ch <- descForwardDropped
}

// Collect implements prometheus.Collector.
func (s *OTLPSink) Collect(ch chan<- prometheus.Metric) {
	var sent, dropped uint64
	if s.fwd != nil {
		sent, dropped = s.fwd.forwarded.Load(), s.fwd.dropped.Load()
	}
	ch <- prometheus.MustNewConstMetric(descForwarded, prometheus.CounterValue, float64(sent))
	ch <- prometheus.MustNewConstMetric(descForwardDropped, prometheus.CounterValue, float64(dropped+s.fwdOff.Load()))
}

// Dropped returns the records lost so far: the queue was full, the sink
// was closed, or the exporter failed to deliver the request's span.
func (s *OTLPSink) Dropped() uint64 { return s.dropped.Load() + s.exp.failed.Load() }

// Exported returns the records whose request span the exporter delivered.
// A record the sampler (OTEL_TRACES_SAMPLER) left out is neither exported
// nor dropped.
func (s *OTLPSink) Exported() uint64 { return s.exp.exported.Load() }

// Close stops accepting records, turns the queued ones into spans and
// flushes them, waiting at most until ctx is done; records still queued
// then are dropped and counted. Close is idempotent.
func (s *OTLPSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	var err error
	select {
	case <-s.done:
	case <-ctx.Done():
		s.stopping.Store(true)
		err = ctx.Err()
	}
	if s.fwd != nil { // before the provider's shutdown stops the client they share
		s.fwd.close(ctx)
	}
	// Shutdown flushes the batch processor and stops its goroutine. When
	// ctx is already done it does not wait for the export in flight, which
	// ends with the exporter's own timeout.
	if e := s.tp.Shutdown(ctx); e != nil && err == nil {
		err = e
	}
	return err
}

func (s *OTLPSink) run() {
	defer close(s.done)
	var segs []Segment
	var attrs []attribute.KeyValue
	for k := range s.queue {
		if s.stopping.Load() {
			s.dropped.Add(1)
			continue
		}
		segs, attrs = s.export(&k, segs[:0], attrs[:0])
	}
}

// spanIDs carries the ids the next span must get from recordIDs.
type spanIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

type spanIDsKey struct{}

// recordIDs gives the request span the record's own ids (the span id the
// proxy sent upstream in traceparent, so the engine's spans hang under
// it); spans without ids in their context (the stage spans) get random
// ones.
type recordIDs struct{}

func (recordIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ids, ok := ctx.Value(spanIDsKey{}).(spanIDs); ok {
		return ids.trace, ids.span
	}
	var t trace.TraceID
	for !t.IsValid() {
		putUint64(t[:8], rand.Uint64())
		putUint64(t[8:], rand.Uint64())
	}
	return t, randomSpanID()
}

func (recordIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if ids, ok := ctx.Value(spanIDsKey{}).(spanIDs); ok {
		return ids.span
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		putUint64(s[:], rand.Uint64())
	}
	return s
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// Attribute keys of our own (the GenAI, HTTP and server ones are the
// OpenTelemetry semantic conventions').
const (
	attrPrefix       = "ttftlens."
	attrStagePrefix  = "ttftlens.stage."
	attrEnginePrefix = "ttftlens.engine."
)

// stageAttrKeys are "ttftlens.stage.<stage>_ms", built once.
var stageAttrKeys, engineAttrKeys = func() (s [stages.NumStages]attribute.Key, e [stages.NumEngineDurs]attribute.Key) {
	for i := range stages.NumStages {
		s[i] = attribute.Key(attrStagePrefix + stages.Stage(i).String() + "_ms")
	}
	for i := range stages.NumEngineDurs {
		e[i] = attribute.Key(attrEnginePrefix + stages.EngineDur(i).String() + "_ms")
	}
	return
}()

// Operation is the GenAI operation name (gen_ai.operation.name) of a
// request path, "" when the path is not a generation endpoint.
func Operation(path string) string {
	switch path {
	case "/v1/chat/completions":
		return "chat"
	case "/v1/completions":
		return "text_completion"
	case "/v1/embeddings":
		return "embeddings"
	}
	return ""
}

// SpanName is the request span's name: "{operation} {model}" per the
// GenAI conventions ("chat llama-3-8b"), the operation alone without a
// model, and the HTTP method for other paths (paths are not bounded).
func SpanName(r *record.Record) string {
	op := Operation(r.Path)
	switch {
	case op == "":
		if r.Method == "" {
			return "HTTP"
		}
		return r.Method
	case r.Model == "":
		return op
	}
	return op + " " + r.Model
}

// finishReason maps an end detail to the model's finish reason
// (gen_ai.response.finish_reasons), "" when the model gave none.
func finishReason(d endreason.Detail) string {
	switch d {
	case endreason.DetailStop, endreason.DetailNoDoneMarker:
		return "stop"
	case endreason.DetailLength:
		return "length"
	case endreason.DetailToolCalls:
		return "tool_calls"
	case endreason.DetailContentFilter:
		return "content_filter"
	}
	return ""
}

// serverFault reports whether the span's status is Error: the request
// failed on the serving side (as HTTP server spans treat 5xx).
func serverFault(r endreason.Reason) bool {
	switch r {
	case endreason.WorkerFailure, endreason.UpstreamDisconnect, endreason.Deadline:
		return true
	}
	return false
}

// requestAttrs appends the request span's attributes.
func requestAttrs(a []attribute.KeyValue, k *kept) []attribute.KeyValue {
	r, bd := &k.r, &k.bd
	if op := Operation(r.Path); op != "" {
		a = append(a, attribute.String("gen_ai.operation.name", op))
	}
	if r.Model != "" {
		a = append(a, attribute.String("gen_ai.request.model", r.Model))
	}
	if f := finishReason(r.Detail); f != "" {
		a = append(a, attribute.StringSlice("gen_ai.response.finish_reasons", []string{f}))
	}
	if r.TokensIn > 0 {
		a = append(a, attribute.Int("gen_ai.usage.input_tokens", r.TokensIn))
	}
	if r.TokensOut > 0 {
		a = append(a, attribute.Int("gen_ai.usage.output_tokens", r.TokensOut))
	}
	if r.ReasoningTokens > 0 {
		a = append(a, attribute.Int("gen_ai.usage.reasoning.output_tokens", r.ReasoningTokens))
	}
	if bd.OK {
		a = append(a, attribute.Float64("gen_ai.response.time_to_first_chunk", bd.TTFT.Seconds()))
	}
	if r.Upstream != "" {
		a = append(a, attribute.String("server.address", r.Upstream))
	}
	if r.UpstreamConn != record.ConnNone {
		a = append(a, attribute.String(attrPrefix+"upstream_conn", r.UpstreamConn.String()))
	}
	a = append(a,
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.Path),
	)
	if r.Status != 0 {
		a = append(a, attribute.Int("http.response.status_code", r.Status))
	}
	if r.Reason != endreason.Stop && r.Reason != endreason.Length {
		a = append(a, attribute.String("error.type", errorType(r)))
	}

	a = append(a,
		attribute.String(attrPrefix+"request_id", r.RequestID),
		attribute.String(attrPrefix+"end_reason", r.Reason.String()),
		attribute.String(attrPrefix+"end_detail", string(r.Detail)),
		attribute.Bool(attrPrefix+"stream", r.Streaming),
		attribute.Float64(attrPrefix+"e2e_ms", millis(r.E2E())),
		attribute.Int(attrPrefix+"events", r.Stream.Events),
		attribute.Int64(attrPrefix+"bytes_in", r.BytesIn),
		attribute.Int64(attrPrefix+"bytes_out", r.BytesOut),
	)
	if r.Key != "" {
		a = append(a, attribute.String(attrPrefix+"key", r.Key))
	}
	if r.Reason == endreason.ClientCancel {
		a = append(a,
			attribute.String(attrPrefix+"phase", r.Phase.String()),
			attribute.Float64(attrPrefix+"cancel_to_close_ms", millis(r.CancelToClose)),
			attribute.Int(attrPrefix+"tokens_after_cancel", r.TokensAfterCancel),
		)
	}
	if r.TokensOut > 0 {
		a = append(a, attribute.Bool(attrPrefix+"usage_reported", r.UsageReported))
	}
	if d, ok := record.FirstAnswer(&r.Timeline); ok {
		a = append(a, attribute.Float64(attrPrefix+"first_answer_ms", millis(d)))
	}
	if bd.OK {
		a = append(a, attribute.Float64(attrPrefix+"ttft_ms", millis(bd.TTFT)))
		for i, d := range bd.Stages {
			a = append(a, attribute.Float64(string(stageAttrKeys[i]), millis(d)))
		}
		if bd.Unsplit {
			a = append(a, attribute.Bool(attrPrefix+"upstream_unsplit", true))
		}
		if bd.Inconsistent {
			a = append(a, attribute.Bool(attrPrefix+"engine_report_inconsistent", true))
		}
	}
	for d := range stages.NumEngineDurs {
		if v, ok := r.Timeline.Engine(d); ok {
			a = append(a, attribute.Float64(string(engineAttrKeys[d]), millis(v)))
		}
	}
	if r.EngineSource != "" {
		a = append(a, attribute.String(attrPrefix+"engine_report", r.EngineSource))
	}
	if inf := r.Timeline.Inferred(); inf != 0 {
		var names []string
		for d := range stages.NumEngineDurs {
			if inf.Has(d) {
				names = append(names, d.String())
			}
		}
		a = append(a, attribute.StringSlice(attrPrefix+"engine_report_inferred", names))
	}
	if gaps := r.Stream.Gaps(); gaps.N > 0 {
		a = append(a,
			attribute.Float64(attrPrefix+"itl.p50_ms", millis(gaps.P50)),
			attribute.Float64(attrPrefix+"itl.p99_ms", millis(gaps.P99)),
			attribute.Float64(attrPrefix+"itl.max_ms", millis(gaps.Max)),
		)
	}
	if r.Stream.Stalls > 0 {
		a = append(a, attribute.Int(attrPrefix+"stalls", r.Stream.Stalls))
	}
	return a
}

// errorType is error.type: the end detail, or the reason when the detail
// is empty.
func errorType(r *record.Record) string {
	if r.Detail != "" {
		return string(r.Detail)
	}
	return r.Reason.String()
}

// maxStatusDescription bounds the error text put on a span's status.
const maxStatusDescription = 512

// export turns one record into its spans. segs and attrs are scratch.
func (s *OTLPSink) export(k *kept, segs []Segment, attrs []attribute.KeyValue) ([]Segment, []attribute.KeyValue) {
	r := &k.r
	ids := spanIDs{trace: trace.TraceID(r.TraceID), span: trace.SpanID(r.SpanID)}
	ctx := context.WithValue(context.Background(), spanIDsKey{}, ids)
	if !r.ParentID.IsZero() {
		// The caller's sampled flag reaches the sampler (by default
		// parentbased_always_on: a caller that did not sample gets no
		// spans from us either; OTEL_TRACES_SAMPLER may say otherwise).
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: ids.trace, SpanID: trace.SpanID(r.ParentID), TraceFlags: trace.TraceFlags(r.TraceFlags), Remote: true,
		}))
	}
	segs = Segments(segs, r)
	wall := r.Timeline.Wall()
	end := r.E2E()
	for _, g := range segs {
		if g.Kind != SegPredicted {
			end = max(end, g.End)
		}
	}
	attrs = requestAttrs(attrs, k)
	_, span := s.tracer.Start(ctx, SpanName(r),
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(wall),
		trace.WithAttributes(attrs...),
	)
	if serverFault(r.Reason) {
		desc := r.Error
		if desc == "" {
			desc = errorType(r)
		}
		if len(desc) > maxStatusDescription {
			desc = desc[:maxStatusDescription]
		}
		span.SetStatus(codes.Error, desc)
	}
	if span.SpanContext().IsSampled() {
		child := trace.ContextWithSpan(context.Background(), span)
		for _, g := range segs {
			if g.Kind == SegFinish || g.Kind == SegPredicted { // a prediction is not a time spent
				continue
			}
			segAttrs := []attribute.KeyValue{attribute.String(attrPrefix+"segment", g.Kind.String())}
			if g.Inferred {
				segAttrs = append(segAttrs, attribute.Bool(attrPrefix+"inferred", true))
			}
			_, c := s.tracer.Start(child, g.Name,
				trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithTimestamp(wall.Add(g.Start)),
				trace.WithAttributes(segAttrs...),
			)
			c.End(trace.WithTimestamp(wall.Add(g.End)))
		}
	}
	span.End(trace.WithTimestamp(wall.Add(end)))
	return segs, attrs
}

// countingExporter counts the request spans (kind SERVER, one per record)
// in the batches it exported or failed to export.
type countingExporter struct {
	sdktrace.SpanExporter
	exported, failed atomic.Uint64
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	var n uint64
	for _, sp := range spans {
		if sp.SpanKind() == trace.SpanKindServer {
			n++
		}
	}
	if err != nil {
		e.failed.Add(n)
	} else {
		e.exported.Add(n)
	}
	return err
}
