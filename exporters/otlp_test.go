package exporters

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// collector is a real OTLP/HTTP endpoint: it decodes every
// ExportTraceServiceRequest it receives.
type collector struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
	headers  http.Header
	requests int
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected "+r.URL.Path+" "+r.Header.Get("Content-Type"), http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.requests++
	c.headers = r.Header.Clone()
	for _, rs := range req.ResourceSpans {
		c.resource = attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// attrMap renders attributes as strings for comparison.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		var s string
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			s = x.StringValue
		case *commonpb.AnyValue_IntValue:
			s = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_DoubleValue:
			s = fmt.Sprint(x.DoubleValue)
		case *commonpb.AnyValue_BoolValue:
			s = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_ArrayValue:
			for i, e := range x.ArrayValue.Values {
				if i > 0 {
					s += ","
				}
				s += e.GetStringValue()
			}
			s = "[" + s + "]"
		}
		m[kv.Key] = s
	}
	return m
}

// otlpFixture is a fixture record with its own ids.
func otlpFixture(t *testing.T, name string, n byte) *record.Record {
	r := fixtureByName(t, name)
	r.RequestID = "otlp-" + name
	r.TraceID[15] = n
	r.SpanID[7] = n
	return r
}

// TestOTLPSpans exports fixture records to a real OTLP/HTTP endpoint,
// configured through the standard environment variables, and checks what
// arrived: ids, parentage, names, kinds, timestamps and attributes.
func TestOTLPSpans(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
	t.Setenv("OTEL_SERVICE_NAME", "ttftlens-under-test")
	if !OTLPEnabled(getenvFrom(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL})) {
		t.Fatal("OTLPEnabled is false with an endpoint set")
	}
	sink, err := NewOTLPSink(context.Background(), OTLPOptions{ServiceVersion: "v-test"})
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		name     string
		children []string
		attrs    map[string]string
		absent   []string
		errored  bool
	}
	tests := []struct {
		fixture string
		want    want
	}{
		{"stop_engine_report", want{
			name:     "chat llama-3-8b",
			children: []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport", "decode"},
			attrs: map[string]string{
				"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama-3-8b",
				"gen_ai.response.finish_reasons": "[stop]", "gen_ai.usage.input_tokens": "512", "gen_ai.usage.output_tokens": "200",
				"gen_ai.response.time_to_first_chunk": "0.045156789", "server.address": "vllm-a", "http.response.status_code": "200",
				"http.request.method": "POST", "url.path": "/v1/chat/completions",
				"ttftlens.end_reason": "stop", "ttftlens.end_detail": "finish_stop", "ttftlens.request_id": "otlp-stop_engine_report",
				"ttftlens.stage.prefill_ms": "30", "ttftlens.stage.queue_ms": "5.015", "ttftlens.stage.preparation_ms": "1.28",
				"ttftlens.ttft_ms": "45.157", "ttftlens.engine.sync_ms": "2", "ttftlens.engine_report": "server-timing",
				"ttftlens.engine.recv_ms": "0.08", "ttftlens.engine.emit_ms": "0.15", "ttftlens.upstream_conn": "reused",
				"ttftlens.key": "team-a", "ttftlens.usage_reported": "true",
			},
			absent: []string{"error.type", "ttftlens.phase", "ttftlens.upstream_unsplit"},
		}},
		{"client_cancel_mid_stream", want{
			name:     "chat llama-3-8b",
			children: []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport", "decode"},
			attrs: map[string]string{
				"error.type": "client_closed", "ttftlens.end_reason": "client_cancel", "ttftlens.phase": "decoding",
				"ttftlens.cancel_to_close_ms": "1.235", "ttftlens.tokens_after_cancel": "3",
			},
			absent: []string{"gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens"},
		}},
		// A prediction is drawn on the requests page, never a span.
		{"stop_least_ttft", want{
			name:     "chat llama-3-8b",
			children: []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport", "decode"},
			attrs:    map[string]string{"ttftlens.end_reason": "stop"},
		}},
		{"deadline_before_first_token", want{
			name:     "chat llama-3-8b",
			children: []string{"gateway", "route", "queue", "upstream"},
			attrs:    map[string]string{"error.type": "ttft_deadline", "ttftlens.end_reason": "deadline", "ttftlens.e2e_ms": "30000.15"},
			absent:   []string{"gen_ai.response.time_to_first_chunk", "ttftlens.stage.prefill_ms", "gen_ai.usage.output_tokens"},
			errored:  true,
		}},
		{"worker_failure_5xx", want{
			name:     "chat llama-3-8b",
			children: []string{"gateway", "route", "queue", "upstream"},
			attrs:    map[string]string{"error.type": "upstream_5xx", "http.response.status_code": "502", "server.address": "vllm-b"},
			errored:  true,
		}},
	}
	recs := map[string]*record.Record{}
	for i, tt := range tests {
		r := otlpFixture(t, tt.fixture, byte(i+1))
		recs[tt.fixture] = r
		sink.Emit(r)
	}
	// A caller that did not sample its trace gets no spans from us.
	unsampled := otlpFixture(t, "stop_engine_report", byte(len(tests)+1))
	unsampled.TraceFlags = 0
	sink.Emit(unsampled)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sink.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if sink.Exported() != uint64(len(tests)) || sink.Dropped() != 0 {
		t.Fatalf("exported %d dropped %d, want %d and 0", sink.Exported(), sink.Dropped(), len(tests))
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.spans {
		if bytes.Equal(s.TraceId, unsampled.TraceID[:]) {
			t.Errorf("span %q exported for a caller that did not sample the trace", s.Name)
		}
	}
	if got := col.headers.Get("X-Tenant"); got != "acme" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS not applied: x-tenant %q", got)
	}
	if col.resource["service.name"] != "ttftlens-under-test" || col.resource["service.version"] != "v-test" || !isUUIDv4(col.resource["service.instance.id"]) {
		t.Errorf("resource %v", col.resource)
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			r := recs[tt.fixture]
			bd := r.Breakdown()
			root := findSpan(col.spans, r.SpanID[:])
			if root == nil {
				t.Fatalf("no span with the record's span id %s", r.SpanID)
			}
			if !bytes.Equal(root.TraceId, r.TraceID[:]) {
				t.Errorf("trace id %x, want %s", root.TraceId, r.TraceID)
			}
			wantParent := []byte(nil)
			if !r.ParentID.IsZero() {
				wantParent = r.ParentID[:]
			}
			if !bytes.Equal(root.ParentSpanId, wantParent) {
				t.Errorf("parent %x, want %x", root.ParentSpanId, wantParent)
			}
			if root.Name != tt.want.name || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("name %q kind %v", root.Name, root.Kind)
			}
			start := uint64(wall.UnixNano())
			if root.StartTimeUnixNano != start || root.EndTimeUnixNano != start+uint64(r.E2E()) {
				t.Errorf("root %d..%d, want %d..%d", root.StartTimeUnixNano, root.EndTimeUnixNano, start, start+uint64(r.E2E()))
			}
			if tt.want.errored != (root.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
				t.Errorf("status %v, want error=%v", root.Status, tt.want.errored)
			}
			attrs := attrMap(root.Attributes)
			for k, v := range tt.want.attrs {
				if attrs[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
				}
			}
			for _, k := range tt.want.absent {
				if v, ok := attrs[k]; ok {
					t.Errorf("attribute %s = %q, want absent", k, v)
				}
			}

			var kids []*tracepb.Span
			for _, sp := range col.spans {
				if bytes.Equal(sp.ParentSpanId, r.SpanID[:]) && bytes.Equal(sp.TraceId, r.TraceID[:]) {
					kids = append(kids, sp)
				}
			}
			// Stable by start: the stages are contiguous, zero-length ones
			// share a start, and decode starts inside transport.
			slices.SortStableFunc(kids, func(a, b *tracepb.Span) int { return childOrder(a) - childOrder(b) })
			var names []string
			for _, k := range kids {
				names = append(names, k.Name)
				if k.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
					t.Errorf("%s kind %v", k.Name, k.Kind)
				}
				if k.StartTimeUnixNano < root.StartTimeUnixNano || k.EndTimeUnixNano > root.EndTimeUnixNano || k.EndTimeUnixNano < k.StartTimeUnixNano {
					t.Errorf("%s %d..%d outside the request span %d..%d", k.Name, k.StartTimeUnixNano, k.EndTimeUnixNano, root.StartTimeUnixNano, root.EndTimeUnixNano)
				}
			}
			if !slices.Equal(names, tt.want.children) {
				t.Fatalf("children %v, want %v", names, tt.want.children)
			}
			// Stages: contiguous from the request's start; with a first
			// token they sum to TTFT; without one, they run to the end.
			at := root.StartTimeUnixNano
			for _, k := range kids {
				if k.Name == SegNameDecode {
					continue
				}
				if k.StartTimeUnixNano != at {
					t.Errorf("%s starts at +%d, want +%d (contiguous)", k.Name, k.StartTimeUnixNano-start, at-start)
				}
				at = k.EndTimeUnixNano
			}
			if bd.OK {
				if at-start != uint64(bd.TTFT) {
					t.Errorf("stages end at +%d, want TTFT %d", at-start, bd.TTFT)
				}
				ft, _ := r.Timeline.At(stages.FirstToken)
				lt, _ := r.Timeline.At(stages.LastToken)
				dec := kids[len(kids)-1]
				if dec.StartTimeUnixNano != start+uint64(ft) || dec.EndTimeUnixNano != start+uint64(lt) {
					t.Errorf("decode +%d..+%d, want first token +%d .. last token +%d", dec.StartTimeUnixNano-start, dec.EndTimeUnixNano-start, ft, lt)
				}
				pre := kids[stages.Prefill]
				if d, _ := r.Timeline.Engine(stages.EnginePrefill); pre.EndTimeUnixNano-pre.StartTimeUnixNano != uint64(d) {
					t.Errorf("prefill span %d ns, engine said %d", pre.EndTimeUnixNano-pre.StartTimeUnixNano, d)
				}
			} else if at != root.EndTimeUnixNano {
				t.Errorf("stages end at +%d, want the request's end +%d", at-start, root.EndTimeUnixNano-start)
			}
		})
	}
}

// TestOTLPReasoningAttrs: a reasoning stream's request span carries the
// reasoning tokens under the GenAI name and the time to the first answer
// beside TTFT; a model that did not reason carries neither reasoning count.
func TestOTLPReasoningAttrs(t *testing.T) {
	reasoning := keep(reasoningFixture.record())
	attrs := map[string]string{}
	for _, kv := range requestAttrs(nil, &reasoning) {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{
		"gen_ai.usage.reasoning.output_tokens": "120", "gen_ai.usage.output_tokens": "160",
		"ttftlens.first_answer_ms": "1684.832", "ttftlens.ttft_ms": "40.041",
	} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	plain := keep(fixtureByName(t, "stop_engine_report"))
	for _, kv := range requestAttrs(nil, &plain) {
		if kv.Key == "gen_ai.usage.reasoning.output_tokens" || kv.Key == "ttftlens.first_answer_ms" {
			t.Errorf("attribute %s = %s on a record with no reasoning and no first answer mark", kv.Key, kv.Value.String())
		}
	}
}

// childOrder ranks stage spans by their stage, decode after them.
func childOrder(s *tracepb.Span) int {
	for i := range stages.NumStages {
		if s.Name == stages.Stage(i).String() {
			return int(i)
		}
	}
	if s.Name == SegNameUpstream {
		return int(stages.NumStages)
	}
	return int(stages.NumStages) + 1
}

func findSpan(spans []*tracepb.Span, id []byte) *tracepb.Span {
	for _, s := range spans {
		if bytes.Equal(s.SpanId, id) {
			return s
		}
	}
	return nil
}

// isUUIDv4 reports whether s is an RFC 4122 version 4 UUID in its text form.
func isUUIDv4(s string) bool {
	if len(s) != 36 || s[14] != '4' || !strings.ContainsRune("89ab", rune(s[19])) {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return true
}

// TestOTLPResourceInstance holds every process's spans apart: each
// resource gets its own service.instance.id unless the environment names
// one, and the environment's other attributes still win over ours.
func TestOTLPResourceInstance(t *testing.T) {
	tests := []struct {
		name      string
		attrs     string // OTEL_RESOURCE_ATTRIBUTES
		service   string // OTEL_SERVICE_NAME
		wantID    string // "" = a fresh UUID v4 per resource
		wantName  string
		wantOther map[string]string
	}{
		{name: "generated", wantName: "ttftlens"},
		{name: "from the environment", attrs: "service.instance.id=pod-a,k8s.pod.name=pod-a", wantID: "pod-a", wantName: "ttftlens",
			wantOther: map[string]string{"k8s.pod.name": "pod-a"}},
		{name: "other attributes keep the generated id", attrs: "deployment.environment.name=prod", service: "gw", wantName: "gw",
			wantOther: map[string]string{"deployment.environment.name": "prod"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tt.attrs)
			t.Setenv("OTEL_SERVICE_NAME", tt.service)
			var ids []string
			for range 2 {
				res, err := otlpResource(context.Background(), "v1")
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, kv := range res.Attributes() {
					got[string(kv.Key)] = kv.Value.String()
				}
				if got["service.name"] != tt.wantName || got["service.version"] != "v1" {
					t.Errorf("service %q version %q, want %q v1", got["service.name"], got["service.version"], tt.wantName)
				}
				for k, v := range tt.wantOther {
					if got[k] != v {
						t.Errorf("%s = %q, want %q", k, got[k], v)
					}
				}
				ids = append(ids, got["service.instance.id"])
			}
			switch {
			case tt.wantID != "":
				if ids[0] != tt.wantID || ids[1] != tt.wantID {
					t.Errorf("service.instance.id %q, want %q", ids, tt.wantID)
				}
			case !isUUIDv4(ids[0]) || !isUUIDv4(ids[1]) || ids[0] == ids[1]:
				t.Errorf("service.instance.id %q, want two distinct UUIDs v4", ids)
			}
		})
	}
}

func getenvFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestOTLPEnabled(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tt := range tests {
		if got := OTLPEnabled(getenvFrom(tt.env)); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.env, got, tt.want)
		}
	}
}

func TestSpanName(t *testing.T) {
	tests := []struct {
		method, path, model, want string
	}{
		{"POST", "/v1/chat/completions", "llama", "chat llama"},
		{"POST", "/v1/completions", "llama", "text_completion llama"},
		{"POST", "/v1/embeddings", "e5", "embeddings e5"},
		{"POST", "/v1/chat/completions", "", "chat"},
		{"GET", "/v1/models", "", "GET"},
		{"", "/x", "", "HTTP"},
	}
	for _, tt := range tests {
		r := record.Record{Method: tt.method, Path: tt.path, Model: tt.model}
		if got := SpanName(&r); got != tt.want {
			t.Errorf("%s %s %q: %q, want %q", tt.method, tt.path, tt.model, got, tt.want)
		}
	}
}

// TestOTLPNeverBlocks exports to a dead and to a stalled endpoint: Emit
// stays fast, the queue drops, and every record is accounted for as
// exported or dropped.
func TestOTLPNeverBlocks(t *testing.T) {
	// The SDK reports every failed export to the global error handler
	// (stderr by default): expected here.
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	defer otel.SetErrorHandler(prev)
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body, so the server notices the client leaving, then
		// hold the export until the exporter gives up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer stalled.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused

	const exportTimeout = 500 * time.Millisecond
	tests := []struct {
		name, url string
	}{
		{"dead endpoint", dead},
		{"stalled endpoint", stalled.URL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink, err := NewOTLPSink(context.Background(), OTLPOptions{
				QueueSize: 4,
				HTTPOptions: []otlptracehttp.Option{
					otlptracehttp.WithEndpointURL(tt.url + "/v1/traces"),
					otlptracehttp.WithTimeout(exportTimeout),
					otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
				},
				BatchOptions: []sdktrace.BatchSpanProcessorOption{
					sdktrace.WithMaxQueueSize(16), sdktrace.WithMaxExportBatchSize(16), sdktrace.WithBatchTimeout(10 * time.Millisecond),
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			r := typical()
			const n = 300
			took := make([]time.Duration, n)
			for i := range n {
				start := time.Now()
				sink.Emit(r)
				took[i] = time.Since(start)
			}
			// An Emit that waited for the stalled exporter would take its
			// whole timeout.
			slices.Sort(took)
			if p50, worst := took[n/2], took[n-1]; worst >= exportTimeout {
				t.Errorf("Emit p50 %v, slowest %v: waited for the exporter", p50, worst)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := sink.Close(ctx); err != nil {
				t.Fatalf("close: %v", err)
			}
			sink.Emit(r) // after Close: dropped
			if sink.Exported() != 0 || sink.Dropped() != n+1 {
				t.Fatalf("exported %d dropped %d, want 0 and %d", sink.Exported(), sink.Dropped(), n+1)
			}
		})
	}
}

// TestRecordIDs checks the id generator: the request span gets the
// record's ids, other spans random valid ones.
func TestRecordIDs(t *testing.T) {
	var g recordIDs
	ids := spanIDs{span: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, trace: [16]byte{9: 1}}
	ctx := context.WithValue(context.Background(), spanIDsKey{}, ids)
	if tr, sp := g.NewIDs(ctx); tr != ids.trace || sp != ids.span {
		t.Errorf("NewIDs %s %s", tr, sp)
	}
	if sp := g.NewSpanID(ctx, ids.trace); sp != ids.span {
		t.Errorf("NewSpanID %s", sp)
	}
	seen := map[string]bool{}
	for range 100 {
		tr, sp := g.NewIDs(context.Background())
		sp2 := g.NewSpanID(context.Background(), tr)
		if !tr.IsValid() || !sp.IsValid() || !sp2.IsValid() || seen[hex.EncodeToString(sp2[:])] {
			t.Fatalf("random ids %s %s %s", tr, sp, sp2)
		}
		seen[hex.EncodeToString(sp2[:])] = true
	}
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkOTLPEmit is the cost on the request's goroutine: copy and
// enqueue (the converting goroutine runs concurrently; drops are
// reported).
func BenchmarkOTLPEmit(b *testing.B) {
	sink, err := NewOTLPSink(context.Background(), OTLPOptions{Exporter: discardExporter{}, QueueSize: 1 << 14})
	if err != nil {
		b.Fatal(err)
	}
	r := typical()
	b.ReportAllocs()
	for b.Loop() {
		sink.Emit(r)
	}
	b.StopTimer()
	_ = sink.Close(context.Background())
	b.ReportMetric(float64(sink.Dropped())/float64(b.N), "drops/op")
}

// BenchmarkOTLPSpans is the converting goroutine's cost per record: ten
// spans built through the SDK and handed to the batch processor.
func BenchmarkOTLPSpans(b *testing.B) {
	sink, err := NewOTLPSink(context.Background(), OTLPOptions{Exporter: discardExporter{}})
	if err != nil {
		b.Fatal(err)
	}
	k := keep(typical())
	var segs []Segment
	var attrs []attribute.KeyValue
	b.ReportAllocs()
	for b.Loop() {
		segs, attrs = sink.export(&k, segs[:0], attrs[:0])
	}
	b.StopTimer()
	_ = sink.Close(context.Background())
}

// TestOTLPInferredAttr: the engine durations the proxy inferred are named
// on the request span, and only then.
func TestOTLPInferredAttr(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    []string
	}{{"reasoning_stream", []string{"queue"}}, {"stop_engine_report", nil}} {
		k := keep(fixtureByName(t, tc.fixture))
		var got []string
		for _, a := range requestAttrs(nil, &k) {
			if a.Key == "ttftlens.engine_report_inferred" {
				got = a.Value.AsStringSlice()
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: ttftlens.engine_report_inferred %v, want %v", tc.fixture, got, tc.want)
		}
	}
}
