package exporters

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// forwarder sends spans received from engines on to the OTLP destination
// of the proxy's own, unchanged, with the same client (endpoint, headers,
// TLS, compression, retries): pointing an engine at the proxy costs its
// user none of the engine's traces. A bounded queue keeps the receiver
// from ever waiting on the destination; what does not fit is dropped and
// counted.
type forwarder struct {
	client otlptrace.Client

	mu     sync.RWMutex // Forward holds it shared; close exclusively, to close queue
	closed bool
	queue  chan []*tracepb.ResourceSpans
	done   chan struct{}

	forwarded, dropped atomic.Uint64 // spans
}

// forwardQueue bounds the export requests waiting to be forwarded.
const forwardQueue = 256

func newForwarder(client otlptrace.Client) *forwarder {
	f := &forwarder{client: client, queue: make(chan []*tracepb.ResourceSpans, forwardQueue), done: make(chan struct{})}
	go f.run()
	return f
}

// Forward queues rs to be sent on, or drops and counts its spans. It never
// blocks; the forwarder keeps rs.
func (f *forwarder) Forward(rs []*tracepb.ResourceSpans) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if !f.closed {
		select {
		case f.queue <- rs:
			return
		default:
		}
	}
	f.dropped.Add(uint64(countSpans(rs)))
}

func (f *forwarder) run() {
	defer close(f.done)
	for rs := range f.queue {
		n := uint64(countSpans(rs))
		if err := f.client.UploadTraces(context.Background(), rs); err != nil {
			f.dropped.Add(n)
			continue
		}
		f.forwarded.Add(n)
	}
}

// close stops taking spans and sends the queued ones, waiting at most
// until ctx ends (the upload in flight then ends with the client's own
// timeout; what is still queued is dropped and counted).
func (f *forwarder) close(ctx context.Context) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.queue)
	f.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
	}
}

func countSpans(rs []*tracepb.ResourceSpans) int {
	n := 0
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	return n
}

var (
	descForwarded = prometheus.NewDesc("ttftlens_engine_spans_forwarded_total",
		"Spans received from engines and sent on to the OTLP destination of the proxy's own traces.", nil, nil)
	descForwardDropped = prometheus.NewDesc("ttftlens_engine_spans_forward_dropped_total",
		"Spans received from engines that could not be sent on: the forwarding queue was full, the destination failed, or no OTLP destination is set.", nil, nil)
)
