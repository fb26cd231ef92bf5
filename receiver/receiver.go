// Package receiver receives OpenTelemetry traces (OTLP) from the engines
// behind the proxy: OTLP/gRPC, and OTLP/HTTP with protobuf or JSON at
// /v1/traces. It decodes with the OpenTelemetry project's own protocol
// definitions (go.opentelemetry.io/proto/otlp; JSON through the
// Collector's pdata, which reads OTLP's hex ids), bounds each export
// request, answers bad ones with the protocol's errors, and hands every
// decoded request's spans to a Consumer. It knows nothing of what the
// spans mean.
package receiver

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Consumer takes the spans of one export request. It is called on the
// receiving goroutine, once per request, and must not block; it may keep
// rs (the receiver does not reuse it).
type Consumer interface {
	ConsumeSpans(rs []*tracepb.ResourceSpans)
}

// Options bound a Receiver. The zero value uses the defaults.
type Options struct {
	// MaxRequestBytes bounds one export request, compressed and
	// decompressed alike (default DefaultMaxRequestBytes). A bigger one is
	// refused: gRPC RESOURCE_EXHAUSTED, HTTP 413.
	MaxRequestBytes int
}

// DefaultMaxRequestBytes is the OpenTelemetry Collector's default limit for
// one gRPC message (4 MiB): engines' exporters batch at most 512 spans, far
// below it.
const DefaultMaxRequestBytes = 4 << 20

// Refusal is why an export request was refused.
type Refusal uint8

// The refusals, as counted (ttftlens_otlp_receiver_refused_total{reason}).
const (
	RefusedTooLarge    Refusal = iota // over MaxRequestBytes
	RefusedMalformed                  // not a valid OTLP export request (or bad compression)
	RefusedUnsupported                // HTTP: a method, path or content type OTLP does not define
	numRefusals
)

var refusalNames = [numRefusals]string{"too_large", "malformed", "unsupported"}

func (r Refusal) String() string { return refusalNames[r] }

// Receiver counts what the servers built from it receive; Handler and
// GRPCServer serve it. Safe for concurrent use.
type Receiver struct {
	consumer Consumer
	max      int
	requests atomic.Uint64 // export requests accepted
	spans    atomic.Uint64 // spans in them
	refused  [numRefusals]atomic.Uint64
}

// New returns a Receiver handing spans to c.
func New(c Consumer, opts Options) *Receiver {
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return &Receiver{consumer: c, max: opts.MaxRequestBytes}
}

// Refused returns how many export requests were refused for why.
func (r *Receiver) Refused(why Refusal) uint64 { return r.refused[why].Load() }

// Received returns the export requests accepted and the spans in them.
func (r *Receiver) Received() (requests, spans uint64) { return r.requests.Load(), r.spans.Load() }

// accept hands one decoded request's spans on.
func (r *Receiver) accept(rs []*tracepb.ResourceSpans) {
	n := 0
	for _, res := range rs {
		for _, ss := range res.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	r.requests.Add(1)
	r.spans.Add(uint64(n))
	r.consumer.ConsumeSpans(rs)
}

func (r *Receiver) refuse(why Refusal) { r.refused[why].Add(1) }

var errTooLarge = errors.New("export request over the receiver's size limit")

var (
	descSpans = prometheus.NewDesc("ttftlens_otlp_receiver_spans_received_total",
		"Spans received from engines over OTLP (gRPC and HTTP), in accepted export requests.", nil, nil)
	descRequests = prometheus.NewDesc("ttftlens_otlp_receiver_requests_total",
		"OTLP export requests accepted from engines.", nil, nil)
	descRefused = prometheus.NewDesc("ttftlens_otlp_receiver_refused_total",
		"OTLP export requests refused, by reason: too_large (over --receive-otlp-max-bytes), malformed (not OTLP), unsupported (HTTP method, path or content type).", []string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (r *Receiver) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSpans
	ch <- descRequests
	ch <- descRefused
}

// Collect implements prometheus.Collector.
func (r *Receiver) Collect(ch chan<- prometheus.Metric) {
	req, spans := r.Received()
	ch <- prometheus.MustNewConstMetric(descSpans, prometheus.CounterValue, float64(spans))
	ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(req))
	for why := range numRefusals {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.Refused(why)), why.String())
	}
}

// Consumers hands each export request's spans to several consumers in
// order.
type Consumers []Consumer

// ConsumeSpans implements Consumer.
func (cs Consumers) ConsumeSpans(rs []*tracepb.ResourceSpans) {
	for _, c := range cs {
		c.ConsumeSpans(rs)
	}
}

// ConsumerFunc is a function as a Consumer.
type ConsumerFunc func(rs []*tracepb.ResourceSpans)

// ConsumeSpans implements Consumer.
func (f ConsumerFunc) ConsumeSpans(rs []*tracepb.ResourceSpans) { f(rs) }
