package spanjoin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/receiver"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/spanjoin"
	"github.com/ttftlens/ttftlens/stages"
)

// records keeps copies of the records written and signals each.
type records struct {
	mu      sync.Mutex
	all     []record.Record
	written chan struct{}
}

func (s *records) Emit(r *record.Record) {
	s.mu.Lock()
	var k record.Record
	r.CopyTo(&k)
	s.all = append(s.all, k)
	s.mu.Unlock()
	s.written <- struct{}{}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestEnginesSpansSplitTheirRecords runs the reference engine as each stock
// engine reports its timing (nothing in band, the engine's request span over
// OTLP through the OpenTelemetry SDK's own exporter, default batch
// settings), behind the proxy and the receiver: every streamed request's
// record is split from its span, into the queue and prefill the engine
// measured, within the wait, exactly once, and none is left waiting after
// shutdown.
func TestEnginesSpansSplitTheirRecords(t *testing.T) {
	cases := []struct {
		shape, kind, protocol string
	}{
		{refengine.SpanVLLM, engines.KindVLLM, "grpc"},
		{refengine.SpanVLLM, engines.KindVLLM, "http/protobuf"},
		{refengine.SpanSGLang, engines.KindSGLang, "grpc"},
		{refengine.SpanSGLang, engines.KindSGLang, "http/protobuf"},
		{refengine.SpanTGI, engines.KindTGI, "grpc"}, // TGI exports over gRPC only
	}
	for _, tc := range cases {
		t.Run(tc.shape+"/"+tc.protocol, func(t *testing.T) {
			t.Parallel()
			runEngineSpans(t, tc.shape, tc.kind, tc.protocol)
		})
	}
}

func runEngineSpans(t *testing.T, shape, kind, protocol string) {
	const clients = 4
	ctx := context.Background()
	sink := &records{written: make(chan struct{}, clients)}
	joiner := spanjoin.New(sink, spanjoin.Options{Wait: time.Minute})
	rcv := receiver.New(joiner, receiver.Options{})

	// The receiver, on the protocol's server.
	rln := listen(t)
	var exp sdktrace.SpanExporter
	var stopReceiver func()
	switch protocol {
	case "grpc":
		srv := rcv.GRPCServer()
		go srv.Serve(rln)
		stopReceiver = srv.Stop
		e, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(rln.Addr().String()), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		exp = e
	default:
		srv := &http.Server{Handler: rcv.Handler()}
		go srv.Serve(rln)
		stopReceiver = func() { srv.Close() }
		e, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(rln.Addr().String()), otlptracehttp.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		exp = e
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)) // the SDK's defaults: a 5 s batch delay

	// The engine, reporting only through spans, one sequence at a time so
	// that concurrent requests queue in it.
	eng, err := refengine.New(refengine.Config{SpanShape: shape, Tracer: tp, MaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	eln := listen(t)
	go eng.Serve(eln)

	p, err := proxy.New(proxy.Config{Upstream: "http://" + eln.Addr().String(), Engine: kind}, joiner, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	pln := listen(t)
	go p.Serve(pln)

	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"ttftlens-ref","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"request %d: %s"}]}`, i, strings.Repeat("a long prompt ", 40))
			resp, err := http.Post("http://"+pln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, %v", resp.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	for range clients { // each record comes when its span joined: after the batch delay
		<-sink.written
	}

	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Error(err)
	}
	joiner.Close(sctx)
	_ = tp.Shutdown(sctx)
	stopReceiver()
	if err := eng.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Log(err)
	}

	if n := joiner.Waiting(); n != 0 {
		t.Errorf("records still waiting after shutdown: %d", n)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.all) != clients {
		t.Fatalf("records = %d, want %d (exactly one per request)", len(sink.all), clients)
	}
	for _, r := range sink.all {
		checkSplit(t, eng, &r, shape)
	}
}

// checkSplit holds r's split to what the engine measured (its ground truth).
func checkSplit(t *testing.T, eng *refengine.Server, r *record.Record, shape string) {
	t.Helper()
	bd := r.Breakdown()
	if r.EngineSource != engines.SourceOTLP || bd.Unsplit || r.EngineSpanMissing != "" {
		t.Fatalf("%s: source %q, unsplit %v, missing %q: not split from its span", r.RequestID, r.EngineSource, bd.Unsplit, r.EngineSpanMissing)
	}
	truth, ok := eng.Truth(r.RequestID)
	if !ok {
		t.Fatalf("%s: the engine has no truth for it", r.RequestID)
	}
	near := func(name string, got, want time.Duration) {
		if d := got - want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: %s = %v, the engine measured %v", r.RequestID, name, got, want)
		}
	}
	queue, _ := r.Timeline.Engine(stages.EngineQueue)
	near("queue", queue, truth.Queue)
	prefill, _ := r.Timeline.Engine(stages.EnginePrefill)
	if shape != refengine.SpanTGI { // TGI gives no prefill: it is inferred
		near("prefill", prefill, truth.Prefill+truth.FirstDecode)
	} else if !r.EngineInferred || prefill < truth.Prefill {
		t.Errorf("%s: TGI's prefill %v (inferred %v), the engine's %v", r.RequestID, prefill, r.EngineInferred, truth.Prefill)
	}
}
