package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/spanjoin"
	"github.com/ttftlens/ttftlens/stages"
)

type nothing struct{}

func (nothing) Emit(*record.Record) {}

// TestReceiverWiring: serve's flags start both receivers, their spans are
// counted on the registry serve exports, and stop ends them.
func TestReceiverWiring(t *testing.T) {
	f := receiveFlags{grpcAddr: "127.0.0.1:0", httpAddr: "127.0.0.1:0", maxBytes: 1 << 20, wait: spanjoin.DefaultWait, maxWaiting: 10}
	reg := prometheus.NewRegistry()
	log := zerolog.Nop()
	r, err := startReceiver(&f, nothing{}, nil, reg, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop(context.Background())

	body := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x"}]}]}]}`
	resp, err := http.Post("http://"+r.addrs[1].String()+"/v1/traces", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP/HTTP: status %d", resp.StatusCode)
	}
	conn, err := grpc.NewClient(r.addrs[0].String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &collectortracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "y"}}}}}}}
	if _, err := collectortracepb.NewTraceServiceClient(conn).Export(context.Background(), req); err != nil {
		t.Fatalf("OTLP/gRPC: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "ttftlens_otlp_receiver_spans_received_total", "ttftlens_engine_spans_total"); err != nil || n != 4 {
		t.Errorf("receiver series: %d, %v; want the received count and the three results", n, err)
	}
	want := "# HELP ttftlens_otlp_receiver_spans_received_total Spans received from engines over OTLP (gRPC and HTTP), in accepted export requests.\n" +
		"# TYPE ttftlens_otlp_receiver_spans_received_total counter\nttftlens_otlp_receiver_spans_received_total 2\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ttftlens_otlp_receiver_spans_received_total"); err != nil {
		t.Error(err)
	}
}

// TestPendingRecordIs202: GET /debug/requests/{id} of a record waiting for
// its engine's span says so, and passes anything else on.
func TestPendingRecordIs202(t *testing.T) {
	j := spanjoin.New(nothing{}, spanjoin.Options{})
	r := &spanReceiver{joiner: j}
	next := func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusNotFound) }
	h := r.pending(next)
	rec := &record.Record{RequestID: "waits", Upstream: "u", Engine: engines.KindVLLM, Reason: endreason.Stop}
	rec.Timeline.Start(func() int64 { return 0 }, time.Time{})
	rec.Timeline.MarkAt(stages.UpstreamSent, time.Millisecond)
	rec.Timeline.MarkAt(stages.FirstTokenFlushed, 2*time.Millisecond)
	j.Emit(rec)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	defer j.Close(done) // writes it at once
	for id, status := range map[string]int{"waits": fasthttp.StatusAccepted, "unknown": fasthttp.StatusNotFound} {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/debug/requests/" + id)
		h(&ctx)
		if ctx.Response.StatusCode() != status {
			t.Errorf("%s: %d, want %d", id, ctx.Response.StatusCode(), status)
		}
	}
}
