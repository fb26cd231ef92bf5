package engines

import (
	"encoding/json"
	"math"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ttftlens/ttftlens/stages"
)

// SourceOTLP is the engine report's source when the durations came from
// the engine's own request span, received over OTLP and joined to the
// record (the spanjoin package).
const SourceOTLP = "otlp"

// SpanKey is what joins an engine's request span to its record: the trace
// id and the parent span id of the traceparent the proxy sent upstream (the
// record's trace_id and span_id).
type SpanKey struct {
	Trace [16]byte
	Span  [8]byte
}

// The span attributes read, as the engines' sources spell them
// (testdata/spans/README.md cites each).
const (
	// vLLM's request span (vllm/tracing: SpanAttributes), seconds as
	// floats; SGLang's request span reuses the names. Any engine that sends
	// them is read the same way.
	attrQueue     = "gen_ai.latency.time_in_queue"
	attrPrefill   = "gen_ai.latency.time_in_model_prefill"
	attrTTFT      = "gen_ai.latency.time_to_first_token"
	attrE2E       = "gen_ai.latency.e2e"
	attrPrompt    = "gen_ai.usage.prompt_tokens"
	attrInput     = "gen_ai.usage.input_tokens" // the GenAI conventions' current name
	attrGenerated = "gen_ai.usage.completion_tokens"
	attrOutput    = "gen_ai.usage.output_tokens"
	attrCached    = "gen_ai.usage.cached_tokens"

	// TGI's request span fields (router/src/server.rs, span.record), Rust
	// Duration Debug strings ("12.3ms", "1.2s", "345.6µs").
	attrTGIValidation = "validation_time"
	attrTGIQueue      = "queue_time"
	attrTGIInference  = "inference_time"
)

// SpanShape names which engine's span layout a SpanReport was read from.
type SpanShape uint8

// The shapes.
const (
	ShapeNone  SpanShape = iota
	ShapeGenAI           // gen_ai.latency.* (vLLM, SGLang, any engine that sends them)
	ShapeTGI             // TGI's validation_time, queue_time, inference_time
)

// SpanReport is what one engine request span says about its request:
// durations as the engine measured them (never compared with the proxy's
// clock), and its token counts.
type SpanReport struct {
	Shape SpanShape
	// Queue, Prefill, TTFT, E2E are gen_ai.latency.*; for TGI, Queue is
	// queue_time and Prep validation_time. Has says which were present.
	Queue, Prefill, TTFT, E2E, Prep time.Duration
	Has                             spanHas
	// PromptTokens, OutputTokens, CachedTokens are the usage counts (-1:
	// not in the span).
	PromptTokens, OutputTokens, CachedTokens int
}

// spanHas is the set of durations a span carried.
type spanHas uint8

const (
	hasQueue spanHas = 1 << iota
	hasPrefill
	hasTTFT
	hasE2E
	hasPrep
)

// ReadSpan reads sp as an engine's request span. It reports false for a
// span that carries none of the attributes above (an engine's other spans:
// a stage, an HTTP client call), which is not a request's.
func ReadSpan(sp *tracepb.Span) (SpanReport, bool) {
	rep := SpanReport{PromptTokens: -1, OutputTokens: -1, CachedTokens: -1}
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		if f, ok := spanDurations[kv.GetKey()]; ok {
			d, ok := f.parse(v)
			rep.set(f.shape, f.has, f.field(&rep), d, ok)
			continue
		}
		switch kv.GetKey() {
		case attrTGIInference:
			if _, ok := rustDuration(v); ok && rep.Shape == ShapeNone {
				rep.Shape = ShapeTGI
			}
		case attrPrompt, attrInput:
			rep.PromptTokens = count(v, rep.PromptTokens)
		case attrGenerated, attrOutput:
			rep.OutputTokens = count(v, rep.OutputTokens)
		case attrCached:
			rep.CachedTokens = count(v, rep.CachedTokens)
		}
	}
	return rep, rep.Shape != ShapeNone
}

// spanDuration is how one duration attribute is read.
type spanDuration struct {
	shape SpanShape
	has   spanHas
	parse func(*commonpb.AnyValue) (time.Duration, bool)
	field func(*SpanReport) *time.Duration
}

// spanDurations are the duration attributes, by name.
var spanDurations = map[string]spanDuration{
	attrQueue:         {ShapeGenAI, hasQueue, seconds, func(r *SpanReport) *time.Duration { return &r.Queue }},
	attrPrefill:       {ShapeGenAI, hasPrefill, seconds, func(r *SpanReport) *time.Duration { return &r.Prefill }},
	attrTTFT:          {ShapeGenAI, hasTTFT, seconds, func(r *SpanReport) *time.Duration { return &r.TTFT }},
	attrE2E:           {ShapeGenAI, hasE2E, seconds, func(r *SpanReport) *time.Duration { return &r.E2E }},
	attrTGIQueue:      {ShapeTGI, hasQueue, rustDuration, func(r *SpanReport) *time.Duration { return &r.Queue }},
	attrTGIValidation: {ShapeTGI, hasPrep, rustDuration, func(r *SpanReport) *time.Duration { return &r.Prep }},
}

// set records one duration of shape s, when it parsed.
func (r *SpanReport) set(s SpanShape, h spanHas, dst *time.Duration, d time.Duration, ok bool) {
	if !ok {
		return
	}
	if r.Shape == ShapeNone {
		r.Shape = s
	}
	*dst, r.Has = d, r.Has|h
}

// Apply records the span's durations on tl, carved as any engine report is
// (stages.Timeline.Breakdown):
//
//   - gen_ai.latency (vLLM): time_in_queue → EngineQueue,
//     time_in_model_prefill (scheduled to first token, so the first decode
//     step is in it) → EnginePrefill, and time_to_first_token − queue −
//     prefill → EngineRecv (the engine's handling between its arrival and
//     queueing the request: input processing, the hand-off to the engine
//     core). A negative remainder is kept raw, and the breakdown flags the
//     report inconsistent.
//   - SGLang sets no time_in_queue, and its time_in_model_prefill runs from
//     dispatch, so it holds the queue: the queue is its prefill_waiting
//     stage span's duration (Stages) and the prefill what is left; without
//     that span the queue stays inside the prefill.
//   - TGI: queue_time → EngineQueue, validation_time → EngineTokenize; its
//     inference_time is prefill and the whole decode, so the prefill is
//     inferred: the upstream window (UpstreamSent to FirstToken) less what
//     the span gave, as InferQueue does for a missing queue (recorded as
//     inferred: Timeline.InferEngine).
//
// An engine report already on tl (an in-band one) is left as it is; what
// the proxy inferred (a slot wait) gives way to the span. Apply reports
// whether it recorded anything.
func (r *SpanReport) Apply(tl *stages.Timeline, st StageSpans) bool {
	if tl.EngineReported() {
		return false
	}
	tl.DropInferred()
	switch r.Shape {
	case ShapeGenAI:
		queue, queued := r.Queue, r.Has&hasQueue != 0
		if !queued && st.Has&hasQueue != 0 {
			queue, queued = st.Queue, true
			r.Prefill -= queue
		}
		if queued {
			tl.SetEngine(stages.EngineQueue, queue)
		}
		if r.Has&hasPrefill != 0 {
			tl.SetEngine(stages.EnginePrefill, r.Prefill)
			if r.Has&hasTTFT != 0 {
				tl.SetEngine(stages.EngineRecv, r.TTFT-r.Prefill-queue)
			}
		}
	case ShapeTGI:
		if r.Has&hasQueue != 0 {
			tl.SetEngine(stages.EngineQueue, r.Queue)
		}
		if r.Has&hasPrep != 0 {
			tl.SetEngine(stages.EngineTokenize, r.Prep)
		}
		if p, ok := windowLeft(tl, r.Queue+r.Prep); ok {
			tl.InferEngine(stages.EnginePrefill, p)
		}
	}
	return tl.EngineReported()
}

// StageSpans is what an engine's stage spans (children of its request
// span, exported apart from it) said about a request: SGLang's
// prefill_waiting (the queue). Merge them as they come.
type StageSpans struct {
	Queue time.Duration
	Has   spanHas
}

// sglangQueueSpan is SGLang's stage span for the wait in its scheduler's
// queue (python/sglang/srt/observability/req_time_stats.py, RequestStage).
const sglangQueueSpan = "prefill_waiting"

// ReadStageSpan reads sp as a stage span it knows, merging it into st; it
// reports whether it was one. Its duration is the span's own (end −
// start, both on the engine's clock).
func ReadStageSpan(sp *tracepb.Span, st *StageSpans) bool {
	if sp.GetName() != sglangQueueSpan || sp.GetEndTimeUnixNano() < sp.GetStartTimeUnixNano() {
		return false
	}
	d := time.Duration(sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano())
	if d > maxSpanSeconds*time.Second {
		return false
	}
	if st.Has&hasQueue == 0 { // the first copy wins (each tensor-parallel rank may send one)
		st.Queue, st.Has = d, st.Has|hasQueue
	}
	return true
}

// windowLeft is the upstream window (UpstreamSent to FirstToken) less
// taken, when both marks are set and something is left.
func windowLeft(tl *stages.Timeline, taken time.Duration) (time.Duration, bool) {
	sent, ok1 := tl.At(stages.UpstreamSent)
	first, ok2 := tl.At(stages.FirstToken)
	if !ok1 || !ok2 {
		return 0, false
	}
	left := first - sent - taken
	return left, left > 0
}

// seconds reads a duration in seconds: a double (vLLM), or an integer.
func seconds(v *commonpb.AnyValue) (time.Duration, bool) {
	var s float64
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_DoubleValue:
		s = x.DoubleValue
	case *commonpb.AnyValue_IntValue:
		s = float64(x.IntValue)
	default:
		return 0, false
	}
	if math.IsNaN(s) || math.IsInf(s, 0) || math.Abs(s) > maxSpanSeconds {
		return 0, false
	}
	return time.Duration(s * float64(time.Second)), true
}

// maxSpanSeconds bounds a duration read from a span (a day), so that no
// value overflows a time.Duration.
const maxSpanSeconds = 86400

// rustDuration reads a Rust Duration's Debug form ("12.3ms", "1.000000001s",
// "345.6µs", "0ns"), which Go's duration syntax accepts as it is.
func rustDuration(v *commonpb.AnyValue) (time.Duration, bool) {
	s := v.GetStringValue()
	if s == "" {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > maxSpanSeconds*time.Second {
		return 0, false
	}
	return d, true
}

// count reads a token count (an integer, or an integer in a string or a
// JSON-encoded one), keeping old when it is not one.
func count(v *commonpb.AnyValue, old int) int {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		if x.IntValue >= 0 && x.IntValue <= math.MaxInt32 {
			return int(x.IntValue)
		}
	case *commonpb.AnyValue_StringValue:
		var n int32
		if json.Unmarshal([]byte(x.StringValue), &n) == nil && n >= 0 {
			return int(n)
		}
	}
	return old
}

// ReportsSpans reports whether engines of kind send a request span with
// their timing when pointed at an OTLP receiver (vLLM, SGLang, TGI), so
// that a record from one is worth holding for its span before any has
// joined.
func ReportsSpans(kind string) bool {
	switch kind {
	case KindVLLM, KindSGLang, KindTGI:
		return true
	}
	return false
}
