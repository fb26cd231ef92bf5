package spanjoin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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

func listen(t testing.TB) net.Listener {
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

// spanStack is the reference engine playing a stock engine, the receiver,
// the joiner and the proxy, on loopback.
type spanStack struct {
	sink   *records
	joiner *spanjoin.Joiner
	eng    *refengine.Server
	tp     *sdktrace.TracerProvider
	proxy  *proxy.Proxy
	url    string
	stop   func() // the receiver's server
}

// startSpanStack starts a stack whose engine reports as shape over
// protocol ("grpc", "http/protobuf"), running at most maxRunning sequences
// at once; the sink signals up to capacity records without blocking.
func startSpanStack(t testing.TB, shape, kind, protocol string, maxRunning, capacity int) *spanStack {
	ctx := context.Background()
	s := &spanStack{sink: &records{written: make(chan struct{}, capacity)}}
	s.joiner = spanjoin.New(s.sink, spanjoin.Options{Wait: time.Minute})
	rcv := receiver.New(s.joiner, receiver.Options{})

	rln := listen(t)
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "grpc":
		srv := rcv.GRPCServer()
		go srv.Serve(rln)
		s.stop = srv.Stop
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(rln.Addr().String()), otlptracegrpc.WithInsecure())
	default:
		srv := &http.Server{Handler: rcv.Handler()}
		go srv.Serve(rln)
		s.stop = func() { srv.Close() }
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(rln.Addr().String()), otlptracehttp.WithInsecure())
	}
	if err != nil {
		t.Fatal(err)
	}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)) // the SDK's defaults: a 5 s batch delay

	if s.eng, err = refengine.New(refengine.Config{SpanShape: shape, Tracer: s.tp, MaxRunning: maxRunning}); err != nil {
		t.Fatal(err)
	}
	eln := listen(t)
	go s.eng.Serve(eln)

	if s.proxy, err = proxy.New(proxy.Config{Upstream: "http://" + eln.Addr().String(), Engine: kind}, s.joiner, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	pln := listen(t)
	go s.proxy.Serve(pln)
	s.url = "http://" + pln.Addr().String() + "/v1/chat/completions"
	return s
}

// request sends one streamed chat request and reads it whole.
func (s *spanStack) request(t testing.TB, i int) {
	body := fmt.Sprintf(`{"model":"ttftlens-ref","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"request %d: %s"}]}`, i, strings.Repeat("a long prompt ", 40))
	resp, err := http.Post(s.url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, %v", resp.StatusCode, err)
	}
}

// close shuts the proxy down, then the joiner (writing what waits), the
// engine's exporter and the receiver.
func (s *spanStack) close(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.proxy.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	s.joiner.Close(ctx)
	_ = s.tp.Shutdown(ctx)
	s.stop()
	if err := s.eng.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Log(err)
	}
}

func runEngineSpans(t *testing.T, shape, kind, protocol string) {
	const clients = 4
	s := startSpanStack(t, shape, kind, protocol, 1, clients) // one sequence at a time: concurrent requests queue
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.request(t, i)
		}()
	}
	wg.Wait()
	for range clients { // each record comes when its span joined: after the batch delay
		<-s.sink.written
	}
	s.close(t)

	if n := s.joiner.Waiting(); n != 0 {
		t.Errorf("records still waiting after shutdown: %d", n)
	}
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	if len(s.sink.all) != clients {
		t.Fatalf("records = %d, want %d (exactly one per request)", len(s.sink.all), clients)
	}
	for _, r := range s.sink.all {
		checkSplit(t, s.eng, &r, shape)
	}
}

// BenchmarkSpanSplit measures how much of TTFT stays unattributed in front
// of a vLLM-shaped engine that reports only through its spans (over gRPC),
// warm, at 1 and 4 clients: the network, the engine's HTTP handling before
// its arrival stamp and its write of the first token, which no span covers.
func BenchmarkSpanSplit(b *testing.B) {
	for _, c := range []int{1, 4} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			s := startSpanStack(b, refengine.SpanVLLM, engines.KindVLLM, "grpc", 16, 1<<16)
			defer s.close(b)
			for i := range 20 { // warm: the engine's pools, the connections
				s.request(b, i)
			}
			_ = s.tp.ForceFlush(context.Background())
			for range 20 {
				<-s.sink.written
			}
			s.sink.mu.Lock()
			s.sink.all = s.sink.all[:0]
			s.sink.mu.Unlock()

			var wg sync.WaitGroup
			next := make(chan int)
			for range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						s.request(b, i)
					}
				}()
			}
			n := 0
			for b.Loop() {
				next <- n
				n++
			}
			close(next)
			wg.Wait()
			_ = s.tp.ForceFlush(context.Background())
			for range n {
				<-s.sink.written
			}
			s.sink.mu.Lock()
			defer s.sink.mu.Unlock()
			var share, ttft []float64
			for _, r := range s.sink.all {
				bd := r.Breakdown()
				if r.EngineSource != engines.SourceOTLP {
					b.Fatalf("a record not split from its span: %q", r.EngineSpanMissing)
				}
				share = append(share, float64(bd.Stages[stages.Unattributed])/float64(bd.TTFT))
				ttft = append(ttft, float64(bd.TTFT)/1e6)
			}
			slices.Sort(share)
			slices.Sort(ttft)
			b.ReportMetric(ttft[len(ttft)/2], "ttft-p50-ms")
			b.ReportMetric(100*share[len(share)/2], "unattributed-p50-%")
			b.ReportMetric(100*share[len(share)*99/100], "unattributed-p99-%")
		})
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
	} else if !r.Timeline.Inferred().Has(stages.EnginePrefill) || prefill < truth.Prefill {
		t.Errorf("%s: TGI's prefill %v (inferred %v), the engine's %v", r.RequestID, prefill, r.Timeline.Inferred().Has(stages.EnginePrefill), truth.Prefill)
	}
}
