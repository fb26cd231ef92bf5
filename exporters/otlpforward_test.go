package exporters

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestForwardUnchanged: spans received from an engine reach the sink's OTLP
// destination as they came (resource, scope, ids, attributes), through the
// sink's own client, and are counted; with no destination they are counted
// dropped.
func TestForwardUnchanged(t *testing.T) {
	var mu sync.Mutex
	var got []*tracepb.ResourceSpans
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = append(got, req.GetResourceSpans()...)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	sink, err := NewOTLPSink(context.Background(), OTLPOptions{HTTPOptions: []otlptracehttp.Option{otlptracehttp.WithEndpointURL(srv.URL + "/v1/traces")}})
	if err != nil {
		t.Fatal(err)
	}
	engine := &tracepb.ResourceSpans{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "vllm"}}}}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), ParentSpanId: bytes.Repeat([]byte{3}, 8),
			Name: "llm_request", StartTimeUnixNano: 1, EndTimeUnixNano: 2,
			Attributes: []*commonpb.KeyValue{{Key: "gen_ai.latency.time_in_queue", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.5}}}},
		}}}},
	}
	want := proto.Clone(engine).(*tracepb.ResourceSpans)
	sink.Forward([]*tracepb.ResourceSpans{engine})
	if err := sink.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var forwarded *tracepb.ResourceSpans
	for _, rs := range got {
		if rs.GetResource().GetAttributes()[0].GetValue().GetStringValue() == "vllm" {
			forwarded = rs
		}
	}
	if !proto.Equal(forwarded, want) {
		t.Errorf("forwarded %v, want %v", forwarded, want)
	}
	if n := sink.fwd.forwarded.Load(); n != 1 {
		t.Errorf("forwarded count %v, want 1", n)
	}

	off, err := NewOTLPSink(context.Background(), OTLPOptions{Exporter: discardExporter{}})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close(context.Background())
	off.Forward([]*tracepb.ResourceSpans{want})
	if n := off.fwdOff.Load(); n != 1 {
		t.Errorf("without a destination: dropped %v, want 1", n)
	}
}
