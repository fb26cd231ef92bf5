// Package record is the one record every request produces: what the
// request was, its clock, why it ended. The proxy fills it and hands it to
// sinks (exporters) exactly once, when the request is over. Its JSON form
// (the log line) has the fields Field enumerates, in that order.
package record

import (
	"encoding/hex"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// TraceID is a W3C trace id.
type TraceID [16]byte

// SpanID is a W3C span (parent) id.
type SpanID [8]byte

// String returns the lowercase hex form.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// String returns the lowercase hex form.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// IsZero reports whether s is all zeros (no parent).
func (s SpanID) IsZero() bool { return s == SpanID{} }

// Record is one finished request. The proxy reuses Records: a sink must copy
// what it keeps before Emit returns.
type Record struct {
	RequestID string
	TraceID   TraceID
	SpanID    SpanID // our span: the one sent upstream as parent
	ParentID  SpanID // the caller's span, zero when we started the trace
	// TraceFlags are the W3C trace flags sent upstream: the caller's when
	// it sent a traceparent (bit 0x01: it sampled the trace), else sampled.
	TraceFlags byte

	Method   string
	Path     string
	Model    string
	Upstream string // upstream name ("" when none was chosen)
	// Engine is the upstream's engine kind as the proxy knew it when it
	// sent the request ("generic" until identified; "" when none was
	// chosen).
	Engine string
	Key    string // API key name, never the key ("" when unauthenticated)
	// Quota is the key's quota check, part of the gateway stage:
	// QuotaChecked says one ran (the key has a quota), QuotaTime is how
	// long it took (a shared backend's round trip included), and
	// QuotaFallback says the shared backend could not answer and this
	// replica's own buckets decided.
	QuotaChecked, QuotaFallback bool
	QuotaTime                   time.Duration
	// Streaming reports that the client asked for a stream.
	Streaming bool
	// Status is the HTTP status sent to the client (0 when none could be sent).
	Status int

	// UpstreamConn is the connection that carried the request upstream.
	UpstreamConn UpstreamConn

	Reason endreason.Reason
	Detail endreason.Detail
	Phase  endreason.Phase // for ClientCancel only
	// Error is a human-readable account of a failure, for logs ("" when none).
	Error string

	Timeline stages.Timeline
	Stream   stages.Stream

	// TokensOut is the generated tokens: the upstream's usage count when it
	// reported one, otherwise the content events seen.
	TokensOut int
	// TokensIn is the prompt tokens from the upstream's usage (0 = unknown).
	TokensIn int
	// ReasoningTokens is the part of TokensOut the model spent reasoning
	// before its answer: the upstream's usage count when it reported one
	// (completion_tokens_details.reasoning_tokens), otherwise the content
	// events that carried reasoning only.
	ReasoningTokens int
	// UsageReported says TokensOut came from the upstream's usage.
	UsageReported bool
	// CachedTokens is the prompt tokens the engine served from its prefix
	// cache, when CachedReported (usage.prompt_tokens_details.cached_tokens,
	// llama.cpp's cache_n, ...).
	CachedTokens   int
	CachedReported bool
	BytesIn        int64 // request body bytes from the client
	BytesOut       int64 // response body bytes to the client

	// EngineSource names where the engine durations came from ("" = none):
	// "server-timing", "vllm", "llamacpp", ... The durations the proxy
	// inferred rather than read are Timeline.Inferred (engine_report_inferred).
	EngineSource string
	// EngineSpanMissing says why a record that waited for its engine's
	// request span (spanjoin) was written without one: "wait" (none came
	// within --receive-otlp-wait), "full" (too many records were waiting),
	// "shutdown" (the process stopped first); "" when it did not wait or
	// the span joined.
	EngineSpanMissing string

	// EngineLoad says EngineWaiting and EngineRunning hold the engine's own
	// waiting and running request counts, as last scraped from its /metrics
	// before the request was routed.
	EngineLoad                   bool
	EngineWaiting, EngineRunning int64

	// Policy is the routing policy of the pool that chose the upstream
	// ("" when none was chosen).
	Policy string
	// TTFTSLO is the TTFT the request needed (its X-Ttftlens-TTFT-SLO-Ms,
	// else its route's ttft_slo; 0: none), and SLOFallback says its pool
	// was predicted to miss it and the route's fallback pool served it.
	TTFTSLO     time.Duration
	SLOFallback bool
	// Predicted says Prediction holds the stages a least_ttft pool
	// predicted for the chosen upstream, Queue to Transport (Gateway and
	// Route are not predicted: they are over by then).
	Predicted  bool
	Prediction [stages.NumStages]time.Duration
	// PredictionOff is the stage whose prediction was furthest from the
	// measurement, and PredictionOffBy how far (predicted minus measured),
	// when Predicted and a first token came.
	PredictionOff   stages.Stage
	PredictionOffBy time.Duration
	// PrefixAffinity says prefix affinity chose the upstream (no model in
	// the pool had a prediction, or a new prompt was placed), and CachedExpected is the prompt tokens the
	// prefix index expected in the upstream's cache.
	PrefixAffinity bool
	CachedExpected int
	// Probe says the upstream was chosen past the predictions to measure
	// it (a least_ttft probe): its model had no prediction for the
	// request, or nothing had been measured there for a while, or its
	// last probe came sooner than the prediction it passed over; or the
	// request's TTFT SLO, which every prediction missed, was passed to
	// measure models measured long ago (gateway.Choice.PastSLO).
	Probe bool
	// Inputs are what a least_ttft pool asked the chosen upstream's model
	// (gateway/predict) when it routed the request, so that a replay of
	// the records can ask another model the same (bench/replay).
	Inputs PredictionInputs

	// Buffering is what made this response arrive held back, if anything.
	Buffering Buffering

	// Cancellation cost, for ClientCancel: from noticing the client left to
	// closing the upstream connection, and the content events the upstream
	// sent that the client never got (held by the proxy, read but not yet
	// delivered, when it left; the proxy reads nothing after closing).
	CancelToClose     time.Duration
	TokensAfterCancel int
}

// UpstreamConn says which connection carried a request to its upstream.
type UpstreamConn uint8

// The connections.
const (
	ConnNone   UpstreamConn = iota // none was made
	ConnNew                        // dialed for the request (with its TLS handshake)
	ConnReused                     // an idle keep-alive connection from the pool
)

// String is the connection's name in logs and spans: "new", "reused", or
// "" for none.
func (c UpstreamConn) String() string {
	switch c {
	case ConnNew:
		return "new"
	case ConnReused:
		return "reused"
	}
	return ""
}

// Buffering is a set of signs that a response was buffered upstream of the
// proxy: by the engine or by a middlebox between it and us.
type Buffering uint8

// The signs. Shape signs come from the response headers; arrival signs from
// when the content events arrived (thresholds in proxy/buffering.go).
const (
	// BufferedBurst: the content events arrived together, not as generated.
	BufferedBurst Buffering = 1 << iota
	// BufferedLateFirst: a burst whose first token was held back with the
	// rest (it arrived in one upstream read with the second).
	BufferedLateFirst
	// BufferedNotStream: a streaming request got a response that is not an
	// event stream (the whole answer at once).
	BufferedNotStream
	// BufferedContentLength: an event stream with a Content-Length, which
	// means its sender knew the whole body before sending it.
	BufferedContentLength
	// BufferedCompressed: a compressed event stream, which a middlebox may
	// hold back to fill compression blocks.
	BufferedCompressed
	numBufferings = iota
)

var bufferingNames = [numBufferings]string{"burst", "late_first_token", "not_event_stream", "content_length", "compressed"}

// Kinds returns the names of the signs set in b, for logs and metric labels.
func (b Buffering) Kinds() []string {
	var out []string
	for i, n := range bufferingNames {
		if b&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// BufferingKinds returns every sign's name, for pre-creating series.
func BufferingKinds() []string { return bufferingNames[:] }

// PredictionInputs are a least_ttft choice's inputs to the chosen
// upstream's TTFT model: gateway/predict's Load and Expected, and the
// prompt's size, as Predict took them.
type PredictionInputs struct {
	// Set says the rest hold the inputs: a least_ttft pool chose.
	Set bool
	// PromptTokens is the gateway's estimate of the prompt's tokens.
	PromptTokens int
	// InFlight, Waiting (when WaitingKnown), Backlog and Ahead are the
	// upstream's load (predict.Load).
	InFlight     int64
	Waiting      int64
	WaitingKnown bool
	Backlog      time.Duration
	Ahead        time.Duration
	// PrefixTokens and PrefixDistance are what the prefix index expected
	// cached on the upstream and at what distance (predict.Expected), as
	// the index saw it: before the model judged it evicted (CachedExpected
	// is then 0).
	PrefixTokens   int
	PrefixDistance uint64
}

// Reset clears r for reuse, keeping buffers.
func (r *Record) Reset() {
	stream := r.Stream
	stream.Reset()
	*r = Record{Stream: stream}
}

// CopyTo sets *dst to a copy of r for a sink to keep after Emit returns:
// it shares none of the memory the proxy reuses (the stream's gap buffers
// stay behind, their summary is kept: Stream.Copy; strings are immutable,
// and the proxy never makes them alias its buffers). It sorts r's gaps in
// place and allocates nothing.
func (r *Record) CopyTo(dst *Record) {
	*dst = *r
	dst.Stream = r.Stream.Copy()
}

// Breakdown derives r's stages.
func (r *Record) Breakdown() stages.Breakdown { return r.Timeline.Breakdown() }

// PredictedTTFT is the TTFT predicted at routing, when r.Predicted: the
// time to the routed mark as measured (the gateway and route stages) plus
// the predicted rest (PredictedPastRoute), with a first token or without.
func (r *Record) PredictedTTFT() time.Duration {
	routed, _ := r.Timeline.At(stages.Routed)
	return max(routed, 0) + r.PredictedPastRoute()
}

// PredictedPastRoute is the sum of the predicted stages, queue to
// transport.
func (r *Record) PredictedPastRoute() time.Duration {
	var d time.Duration
	for _, p := range r.Prediction {
		d += p
	}
	return d
}

// E2E is the time from receipt to the end of the response.
func (r *Record) E2E() time.Duration {
	d, _ := r.Timeline.At(stages.Done)
	return d
}

// FirstAnswer is the time from receipt to the first answer token handed to
// the client, and whether one was: TTFT counts the first token of any kind,
// reasoning included; this counts the first that is not reasoning only.
// Equal to TTFT when the model did not reason first.
func FirstAnswer(tl *stages.Timeline) (time.Duration, bool) {
	d, ok := tl.At(stages.FirstAnswer)
	return max(d, 0), ok
}

// Sink receives finished records. Emit is called once per request from the
// request's goroutine: it must not block (queue or drop, and count drops)
// and must not keep r after returning.
type Sink interface {
	Emit(r *Record)
}

// Sinks fans a record out to several sinks in order.
type Sinks []Sink

// Emit hands r to every sink.
func (s Sinks) Emit(r *Record) {
	for _, k := range s {
		k.Emit(r)
	}
}
