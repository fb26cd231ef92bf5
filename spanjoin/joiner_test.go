package spanjoin

import (
	"context"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// collect is a sink keeping copies of what it was given.
type collect struct {
	mu      sync.Mutex
	recs    []record.Record
	written chan struct{} // one value per record, when not nil
}

func (c *collect) Emit(r *record.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var k record.Record
	r.CopyTo(&k)
	c.recs = append(c.recs, k)
	if c.written != nil {
		c.written <- struct{}{}
	}
}

func (c *collect) got() []record.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]record.Record(nil), c.recs...)
}

// testClock is the request clock's reading, moved by hand.
type testClock struct{ now int64 }

func (c *testClock) read() int64 { return c.now }

// newRecord is a streamed request to a vLLM upstream that ended stop, its
// upstream window (admitted to the first token's arrival) 100 ms, unsplit.
func newRecord(i int, engine string) *record.Record {
	r := &record.Record{Upstream: "up", Engine: engine, Reason: endreason.Stop, Streaming: true}
	r.TraceID[0], r.TraceID[1] = byte(i), byte(i>>8)
	r.SpanID[0], r.SpanID[1] = byte(i), 0xAA
	c := &testClock{}
	r.Timeline.Start(c.read, time.Time{})
	at := func(m stages.Mark, ms int) { r.Timeline.MarkAt(m, time.Duration(ms)*time.Millisecond) }
	at(stages.GatewayDone, 1)
	at(stages.Routed, 1)
	at(stages.Admitted, 2)
	at(stages.UpstreamSent, 3)
	at(stages.FirstToken, 102)
	at(stages.FirstTokenArrived, 102)
	at(stages.FirstTokenFlushed, 103)
	return r
}

func dbl(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intv(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// vllmSpan is vLLM's llm_request span for r (vllm/v1/engine/output_processor.py
// do_tracing): queue 30 ms, prefill 50 ms, TTFT from its arrival 85 ms.
func vllmSpan(r *record.Record) *tracepb.Span {
	return &tracepb.Span{
		TraceId: r.TraceID[:], SpanId: []byte{1, 2, 3, 4, 5, 6, 7, 8}, ParentSpanId: r.SpanID[:],
		Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
		Attributes: []*commonpb.KeyValue{
			dbl("gen_ai.latency.time_in_queue", 0.030),
			dbl("gen_ai.latency.time_in_model_prefill", 0.050),
			dbl("gen_ai.latency.time_to_first_token", 0.085),
			dbl("gen_ai.latency.e2e", 0.4),
			intv("gen_ai.usage.prompt_tokens", 42),
			str("gen_ai.response.finish_reasons", `["stop"]`),
		},
	}
}

func export(spans ...*tracepb.Span) []*tracepb.ResourceSpans {
	return []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}
}

func newJoiner(t *testing.T, opts Options) (*Joiner, *collect, *clock.Fake) {
	t.Helper()
	fake := &clock.Fake{}
	opts.Clock = fake
	sink := &collect{}
	return New(sink, opts), sink, fake
}

// wantSplit checks that r was split from the vLLM span above.
func wantSplit(t *testing.T, r *record.Record) {
	t.Helper()
	bd := r.Breakdown()
	if r.EngineSource != engines.SourceOTLP || bd.Unsplit || r.EngineSpanMissing != "" {
		t.Fatalf("record not split from its span: source %q unsplit %v missing %q", r.EngineSource, bd.Unsplit, r.EngineSpanMissing)
	}
	want := map[stages.Stage]time.Duration{
		stages.Queue:       1*time.Millisecond + 30*time.Millisecond, // admitted−routed + the engine's queue
		stages.Prefill:     50 * time.Millisecond,
		stages.Preparation: 5 * time.Millisecond, // TTFT − queue − prefill: the engine's own handling
	}
	for s, d := range want {
		if bd.Stages[s] != d {
			t.Errorf("%v = %v, want %v", s, bd.Stages[s], d)
		}
	}
	if r.TokensIn != 42 {
		t.Errorf("tokens_in = %d, want the span's 42", r.TokensIn)
	}
}

func TestSpanAfterRecordJoins(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{})
	r := newRecord(1, engines.KindVLLM)
	j.Emit(r)
	if n := len(sink.got()); n != 0 {
		t.Fatalf("a record that waits for its span was written at once (%d)", n)
	}
	j.ConsumeSpans(export(vllmSpan(r)))
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("records written = %d, want 1", len(got))
	}
	wantSplit(t, &got[0])
	fake.Advance(time.Hour) // its wait's timer must not write it again
	if n := len(sink.got()); n != 1 {
		t.Fatalf("records written after the wait = %d, want still 1", n)
	}
}

func TestSpanBeforeRecordJoins(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{})
	r := newRecord(2, engines.KindVLLM)
	j.ConsumeSpans(export(vllmSpan(r)))
	j.Emit(r)
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("records written = %d, want 1", len(got))
	}
	wantSplit(t, &got[0])
	fake.Advance(time.Hour)
	if n := j.c.spans[spanUnmatched].Load(); n != 0 {
		t.Errorf("the joined span also counted unmatched (%d)", n)
	}
}

func TestNoSpanIsWrittenAfterTheWait(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{Wait: 10 * time.Second})
	r := newRecord(3, engines.KindVLLM)
	j.Emit(r)
	fake.Advance(10*time.Second - time.Nanosecond)
	if n := len(sink.got()); n != 0 {
		t.Fatalf("written before its wait ended (%d)", n)
	}
	fake.Advance(time.Nanosecond)
	got := sink.got()
	if len(got) != 1 || got[0].EngineSpanMissing != MissingWait || !got[0].Breakdown().Unsplit {
		t.Fatalf("after the wait: %d records, missing %q; want one, unsplit, missing wait", len(got), missingOf(got))
	}
	// The span comes after all: late, and the record is not written again.
	j.ConsumeSpans(export(vllmSpan(r)))
	if n := len(sink.got()); n != 1 {
		t.Fatalf("a late span wrote the record again (%d)", n)
	}
	if late := j.c.spans[spanLate].Load(); late != 1 {
		t.Errorf("late spans = %d, want 1", late)
	}
}

func missingOf(rs []record.Record) string {
	if len(rs) == 0 {
		return ""
	}
	return rs[0].EngineSpanMissing
}

func TestUnmatchedSpanIsCounted(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{Wait: time.Second})
	stray := newRecord(4, engines.KindVLLM) // never emitted
	j.ConsumeSpans(export(vllmSpan(stray)))
	fake.Advance(time.Second)
	if n := j.c.spans[spanUnmatched].Load(); n != 1 {
		t.Errorf("unmatched = %d, want 1", n)
	}
	// An engine that started a trace of its own: its span has no parent.
	own := vllmSpan(newRecord(5, engines.KindVLLM))
	own.ParentSpanId = nil
	j.ConsumeSpans(export(own))
	if n := j.c.spans[spanUnmatched].Load(); n != 2 {
		t.Errorf("a root request span: unmatched = %d, want 2", n)
	}
	if len(sink.got()) != 0 {
		t.Error("a span without a record wrote something")
	}
}

// A record that cannot be split by a span goes straight through.
func TestRecordsThatDoNotWait(t *testing.T) {
	cases := map[string]func(r *record.Record){
		"split in band": func(r *record.Record) {
			r.EngineSource = "server-timing"
			r.Timeline.SetEngine(stages.EnginePrefill, time.Millisecond)
		},
		"client cancel":        func(r *record.Record) { r.Reason = endreason.ClientCancel },
		"no first token":       func(r *record.Record) { r.Timeline = stages.Timeline{} },
		"engine without spans": func(r *record.Record) { r.Engine = engines.KindLlamaCpp },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			j, sink, _ := newJoiner(t, Options{})
			r := newRecord(5, engines.KindVLLM)
			change(r)
			j.Emit(r)
			if got := sink.got(); len(got) != 1 || got[0].EngineSpanMissing != "" {
				t.Fatalf("written %d, missing %q; want one at once", len(got), missingOf(got))
			}
		})
	}
}

func TestFullWritesAtOnce(t *testing.T) {
	j, sink, _ := newJoiner(t, Options{MaxWaiting: 2})
	for i := range 3 {
		j.Emit(newRecord(10+i, engines.KindVLLM))
	}
	got := sink.got()
	if len(got) != 1 || got[0].EngineSpanMissing != MissingFull {
		t.Fatalf("over the bound: %d written, missing %q; want one, full", len(got), missingOf(got))
	}
	if j.Waiting() != 2 {
		t.Errorf("waiting = %d, want 2", j.Waiting())
	}
}

// Close joins what comes while it waits and writes the rest, each once.
func TestCloseWritesEveryWaitingRecord(t *testing.T) {
	j, sink, _ := newJoiner(t, Options{})
	sink.written = make(chan struct{}, 3)
	a, b := newRecord(20, engines.KindVLLM), newRecord(21, engines.KindVLLM)
	j.Emit(a)
	j.Emit(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.Close(ctx)
	}()
	j.ConsumeSpans(export(vllmSpan(a)))
	<-sink.written // a joined, while Close waits or before it began
	cancel()
	<-done
	got := sink.got()
	if len(got) != 2 {
		t.Fatalf("records after Close = %d, want 2", len(got))
	}
	byTrace := map[record.TraceID]record.Record{got[0].TraceID: got[0], got[1].TraceID: got[1]}
	wantSplit(t, ptr(byTrace[a.TraceID]))
	if m := byTrace[b.TraceID].EngineSpanMissing; m != MissingShutdown {
		t.Errorf("the record without a span: missing %q, want shutdown", m)
	}
	j.Emit(newRecord(22, engines.KindVLLM)) // after Close: straight through
	if n := len(sink.got()); n != 3 {
		t.Errorf("a record after Close was not written at once (%d)", n)
	}
}

func ptr(r record.Record) *record.Record { return &r }

// An engine that sends no spans costs silentAfter records their wait; a
// span of it, even a late one, makes its records wait again.
func TestSilentUpstreamStopsWaiting(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{Wait: time.Second})
	var last *record.Record
	for i := range silentAfter {
		last = newRecord(30+i, engines.KindVLLM)
		j.Emit(last)
		fake.Advance(time.Second)
	}
	j.Emit(newRecord(60, engines.KindVLLM))
	if got := sink.got(); len(got) != silentAfter+1 || got[silentAfter].EngineSpanMissing != "" {
		t.Fatalf("after %d misses the next record still waited", silentAfter)
	}
	j.ConsumeSpans(export(vllmSpan(last))) // late: the engine does send spans
	j.Emit(newRecord(61, engines.KindVLLM))
	if n := j.Waiting(); n != 1 {
		t.Fatalf("after a late span, waiting = %d, want 1", n)
	}
}

// A generic upstream's records wait once a span of it has come.
func TestGenericUpstreamLearnsSpans(t *testing.T) {
	j, sink, _ := newJoiner(t, Options{})
	first := newRecord(70, engines.KindGeneric)
	j.Emit(first)
	if len(sink.got()) != 1 {
		t.Fatal("a generic upstream's first record waited")
	}
	j.ConsumeSpans(export(vllmSpan(first)))
	second := newRecord(71, engines.KindGeneric)
	j.Emit(second)
	j.ConsumeSpans(export(vllmSpan(second)))
	got := sink.got()
	if len(got) != 2 {
		t.Fatalf("records = %d, want 2", len(got))
	}
	wantSplit(t, &got[1])
}

// SGLang's request span gives its prefill from dispatch, queue included;
// its prefill_waiting stage span, sent by the scheduler apart, gives the
// queue.
func TestSGLangStageSpan(t *testing.T) {
	j, sink, _ := newJoiner(t, Options{})
	r := newRecord(80, engines.KindSGLang)
	thread := []byte{9, 9, 9, 9, 9, 9, 9, 9}
	waiting := &tracepb.Span{
		TraceId: r.TraceID[:], SpanId: []byte{7, 7, 7, 7, 7, 7, 7, 7}, ParentSpanId: thread, Name: "prefill_waiting",
		StartTimeUnixNano: 1_000_000_000, EndTimeUnixNano: 1_030_000_000,
	}
	root := &tracepb.Span{
		TraceId: r.TraceID[:], SpanId: []byte{5, 5, 5, 5, 5, 5, 5, 5}, ParentSpanId: r.SpanID[:], Name: " Req 0123abcd",
		Attributes: []*commonpb.KeyValue{
			dbl("gen_ai.latency.time_in_model_prefill", 0.080),
			dbl("gen_ai.latency.time_to_first_token", 0.085),
			intv("gen_ai.usage.prompt_tokens", 42),
		},
	}
	j.Emit(r)
	j.ConsumeSpans(export(waiting))
	j.ConsumeSpans(export(root))
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("records = %d, want 1", len(got))
	}
	wantSplit(t, &got[0])
}

// TGI's span gives queue and validation as Rust durations; its prefill is
// what is left of the window, inferred.
func TestTGISpan(t *testing.T) {
	j, sink, _ := newJoiner(t, Options{})
	r := newRecord(90, engines.KindTGI)
	j.Emit(r)
	j.ConsumeSpans(export(&tracepb.Span{
		TraceId: r.TraceID[:], SpanId: []byte{5, 5, 5, 5, 5, 5, 5, 5}, ParentSpanId: r.SpanID[:], Name: "chat_completions",
		Attributes: []*commonpb.KeyValue{
			str("validation_time", "5.5ms"), str("queue_time", "30ms"), str("inference_time", "1.2s"),
			str("total_time", "1.24s"), str("time_per_token", "12.3µs"),
		},
	}))
	got := sink.got()
	if len(got) != 1 {
		t.Fatalf("records = %d, want 1", len(got))
	}
	bd := got[0].Breakdown()
	if !got[0].Timeline.Inferred().Has(stages.EnginePrefill) || bd.Unsplit {
		t.Fatalf("inferred %v unsplit %v; want the prefill inferred", got[0].Timeline.Inferred().Has(stages.EnginePrefill), bd.Unsplit)
	}
	// Window sent→first token 99 ms: queue 30, validation 5.5, prefill the rest.
	if bd.Stages[stages.Prefill] != 99*time.Millisecond-35500*time.Microsecond {
		t.Errorf("prefill = %v", bd.Stages[stages.Prefill])
	}
}

// Records and their spans from many goroutines: each record is written
// exactly once, whichever of its span and its wait comes first.
func TestExactlyOnceUnderRaces(t *testing.T) {
	j, sink, fake := newJoiner(t, Options{Wait: time.Second})
	const n = 400
	var wg sync.WaitGroup
	for i := range n {
		r := newRecord(1000+i, engines.KindVLLM)
		sp := vllmSpan(r)
		wg.Add(2)
		go func() { defer wg.Done(); j.Emit(r) }()
		go func() { defer wg.Done(); j.ConsumeSpans(export(sp)) }()
		if i%50 == 0 {
			wg.Add(1)
			go func() { defer wg.Done(); fake.Advance(time.Second) }()
		}
	}
	wg.Wait()
	fake.Advance(time.Hour)
	j.Close(context.Background())
	got := sink.got()
	seen := map[record.TraceID]int{}
	for _, r := range got {
		seen[r.TraceID]++
	}
	if len(got) != n || len(seen) != n {
		t.Fatalf("records written %d for %d requests (%d distinct)", len(got), n, len(seen))
	}
}
