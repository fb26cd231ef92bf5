package exporters

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixedClock is a clock that never moves: fixtures set every mark with
// MarkAt, so only the offsets given matter.
func fixedClock() int64 { return 0 }

var wall = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// fixture is a named hand-built record.
type fixture struct {
	name  string
	build func(r *record.Record)
}

// base fills the identity of a request and starts its timeline.
func base(r *record.Record) {
	r.Timeline.Start(fixedClock, wall)
	r.RequestID = "req-0001"
	r.TraceID = record.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	r.SpanID = record.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	r.TraceFlags = 0x01
	r.Method = "POST"
	r.Path = "/v1/chat/completions"
	r.Model = "llama-3-8b"
	r.Upstream = "vllm-a"
	r.Streaming = true
	r.Status = 200
	r.BytesIn = 412
}

// stream adds n content events to r starting at first, with gaps drawn
// from a seeded generator around mean, and marks first and last token. Every
// event (n plus a role and a usage chunk) is flushed after 5-30 µs inside
// the proxy, one of them after 37 µs.
func stream(r *record.Record, first time.Duration, n int, mean time.Duration, seed uint64) time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed))
	at := first
	for i := range n {
		if i > 0 {
			at += mean/2 + time.Duration(rng.Int64N(int64(mean)))
		}
		r.Stream.Content(at, 250*ms)
	}
	r.Stream.Events = n + 2 // role chunk and usage chunk
	for i := range r.Stream.Events {
		d := 5*us + time.Duration(rng.Int64N(int64(25*us)))
		if i == n/2 {
			d = 37 * us
		}
		r.Stream.Flushed(d)
	}
	r.Timeline.MarkAt(stages.FirstToken, first)
	r.Timeline.MarkAt(stages.LastToken, at)
	return at
}

// proxyMarks sets the marks up to upstream headers, on a reused
// connection.
func proxyMarks(r *record.Record) {
	r.Timeline.MarkAt(stages.GatewayDone, 41234)
	r.Timeline.MarkAt(stages.Routed, 55501)
	r.Timeline.MarkAt(stages.Admitted, 70499)
	r.Timeline.MarkAt(stages.UpstreamConnected, 95*us)
	r.UpstreamConn = record.ConnReused
	r.Timeline.MarkAt(stages.UpstreamSent, 120*us)
	r.Timeline.MarkAt(stages.UpstreamHeaders, 2*ms)
}

var fixtures = []fixture{
	{"stop_engine_report", func(r *record.Record) { engineReportStream(r, 200) }},
	{"stop_unsplit", func(r *record.Record) {
		base(r)
		r.Model = "some-model-a-client-made-up"
		proxyMarks(r)
		r.Timeline.MarkAt(stages.FirstEvent, 80*ms)
		last := stream(r, 80*ms+7, 20, 20*ms, 2)
		r.Timeline.MarkAt(stages.FirstTokenFlushed, 80*ms+19*us+501)
		r.Timeline.MarkAt(stages.Done, last+100*us)
		r.Reason, r.Detail = endreason.Stop, endreason.DetailDoneOnly
		r.TokensOut = 20
		r.BytesOut = 5120
		// The engine says nothing per request; its scraped load does.
		r.EngineLoad, r.EngineWaiting, r.EngineRunning = true, 3, 8
		// Redis did not answer: this replica's own buckets admitted it.
		r.Key, r.QuotaChecked, r.QuotaTime, r.QuotaFallback = "team-b", true, 3*us, true
	}},
	{"engine_inconsistent", func(r *record.Record) {
		base(r)
		proxyMarks(r)
		r.Timeline.MarkAt(stages.FirstEvent, 20*ms)
		last := stream(r, 20*ms, 5, 15*ms, 3)
		r.Timeline.MarkAt(stages.FirstTokenFlushed, 20*ms+40*us)
		r.Timeline.MarkAt(stages.Done, last+50*us)
		// The engine claims more prefill than the proxy saw between admission
		// and the first token, and a negative queue time.
		r.Timeline.SetEngine(stages.EngineQueue, -3*ms)
		r.Timeline.SetEngine(stages.EnginePrefill, 45*ms)
		r.Timeline.SetEngine(stages.EngineFirstDecode, 4*ms)
		r.EngineSource = "vllm"
		r.Reason, r.Detail = endreason.Length, endreason.DetailLength
		r.TokensOut = 5
		r.BytesOut = 1400
	}},
	{"client_cancel_mid_stream", func(r *record.Record) {
		base(r)
		proxyMarks(r)
		r.Timeline.MarkAt(stages.FirstEvent, 60*ms)
		last := stream(r, 61*ms, 40, 12*ms, 4)
		r.Timeline.MarkAt(stages.FirstTokenFlushed, 61*ms+25*us)
		r.Timeline.MarkAt(stages.Done, last+1300*us)
		r.Timeline.SetEngine(stages.EngineQueue, 10*ms)
		r.Timeline.SetEngine(stages.EnginePrefill, 40*ms)
		r.EngineSource = "server-timing"
		r.Reason, r.Detail, r.Phase = endreason.ClientCancel, endreason.DetailClientClosed, endreason.PhaseDecoding
		r.TokensOut = 40
		r.Stream.Blocked = 412345678 // a client that reads slowly
		r.CancelToClose = 1234567
		r.TokensAfterCancel = 3
		r.BytesOut = 9800
	}},
	{"deadline_before_first_token", func(r *record.Record) {
		base(r)
		proxyMarks(r)
		r.Timeline.MarkAt(stages.FirstEvent, 200*ms)
		r.Stream.Events = 1
		r.Timeline.MarkAt(stages.Done, 30*time.Second+150*us)
		r.Reason, r.Detail = endreason.Deadline, endreason.DetailTTFTDeadline
		r.Status = 200 // headers went out with the role chunk
		r.Error = "no first token within 30s"
		r.BytesOut = 120
	}},
	{"worker_failure_5xx", func(r *record.Record) {
		base(r)
		r.Streaming = false
		r.Upstream = "vllm-b"
		proxyMarks(r)
		r.Timeline.MarkAt(stages.Done, 3*ms+2)
		r.Reason, r.Detail = endreason.WorkerFailure, endreason.DetailUpstream5xx
		r.Status = 502
		r.Error = "upstream answered 503: \"overloaded\"\n"
		r.BytesOut = 96
	}},
}

// engineReportStream is a request whose engine reported its timing, with a
// stream of n tokens about 10 ms apart.
func engineReportStream(r *record.Record, n int) {
	base(r)
	r.Key = "team-a"
	r.QuotaChecked, r.QuotaTime = true, 18*us+345 // the quota check's share of the gateway stage
	r.ParentID = record.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	proxyMarks(r)
	r.Timeline.MarkAt(stages.FirstEvent, 30*ms)
	last := stream(r, 45123456, n, 10*ms, 1)
	r.Timeline.MarkAt(stages.FirstTokenFlushed, 45156789)
	r.Timeline.MarkAt(stages.Done, last+300*us)
	r.Timeline.SetEngine(stages.EngineQueue, 5*ms)
	r.Timeline.SetEngine(stages.EngineTokenize, 1200*us)
	r.Timeline.SetEngine(stages.EngineMedia, 0)
	r.Timeline.SetEngine(stages.EnginePrefill, 30*ms)
	r.Timeline.SetEngine(stages.EngineSync, 2*ms)
	r.Timeline.SetEngine(stages.EngineFirstDecode, 6*ms)
	r.Timeline.SetEngine(stages.EngineRecv, 80*us)
	r.Timeline.SetEngine(stages.EngineEmit, 150*us)
	r.EngineSource = "server-timing"
	r.Reason, r.Detail = endreason.Stop, endreason.DetailStop
	r.TokensOut, r.TokensIn, r.UsageReported = n, 512, true
	r.Stream.Blocked = 1234567 // the socket writes of a fast client
	r.BytesOut = 48213
}

// bufferedFixture is a stream a middlebox held back. It is kept out of
// fixtures (whose count other tests rely on); the log and metrics goldens
// include it through allFixtures.
var bufferedFixture = fixture{"buffered_burst", func(r *record.Record) {
	// A middlebox held a compressed stream back and let it go at the
	// end: 40 content events tens of microseconds apart, after 900 ms.
	base(r)
	r.Upstream = "vllm-b"
	proxyMarks(r)
	r.Timeline.MarkAt(stages.FirstEvent, 900*ms)
	last := stream(r, 900*ms+80*us, 40, 60*us, 5)
	r.Timeline.MarkAt(stages.FirstTokenFlushed, 900*ms+95*us)
	r.Timeline.MarkAt(stages.Done, last+30*us)
	r.Reason, r.Detail = endreason.Stop, endreason.DetailStop
	r.Buffering = record.BufferedBurst | record.BufferedLateFirst | record.BufferedCompressed
	r.TokensOut = 40
	r.BytesOut = 7400
}}

// reasoningFixture is a reasoning model's stream: 160 content events, the
// first 120 of them reasoning, the answer from 300 ms before the last
// token. Kept out of fixtures and allFixtures: the log golden has it
// (loggedFixtures), TestMetricsFirstAnswer checks its metrics.
var reasoningFixture = fixture{"reasoning_stream", func(r *record.Record) {
	base(r)
	proxyMarks(r)
	r.Timeline.SetEngine(stages.EnginePrefill, 25*ms)
	r.Timeline.InferEngine(stages.EngineQueue, 9*ms)
	r.EngineSource = "llamacpp"
	r.Timeline.MarkAt(stages.FirstEvent, 40*ms)
	last := stream(r, 40*ms+15*us, 160, 12*ms, 6)
	r.Timeline.MarkAt(stages.FirstTokenFlushed, 40*ms+41*us)
	r.Timeline.MarkAt(stages.FirstAnswer, last-300*ms+23*us)
	r.Timeline.MarkAt(stages.Done, last+60*us)
	r.Reason, r.Detail = endreason.Stop, endreason.DetailStop
	r.TokensOut, r.TokensIn, r.UsageReported, r.ReasoningTokens = 160, 40, true, 120
	r.BytesOut = 31200
}}

// routedFixture is a request a least_ttft pool routed with a prediction:
// its queue took 3 ms longer than predicted, and its engine reported
// 384 of its 512 prompt tokens cached, where the prefix index expected
// 400; it asked for a 2 s TTFT SLO. Kept out of fixtures and allFixtures:
// the log golden has it (loggedFixtures), TestMetricsRouting checks its
// metrics.
var routedFixture = fixture{"stop_least_ttft", func(r *record.Record) {
	engineReportStream(r, 8)
	r.Policy, r.TTFTSLO, r.CachedExpected = "least_ttft", 2*time.Second, 400
	r.Predicted = true
	r.Prediction[stages.Queue] = 2 * ms
	r.Prediction[stages.Preparation] = 1300 * us
	r.Prediction[stages.Prefill] = 29 * ms
	r.Prediction[stages.FirstDecode] = 6200 * us
	r.Prediction[stages.Unattributed] = 500 * us
	r.Prediction[stages.Transport] = 100 * us
	r.PredictionOff, r.PredictionOffBy = stages.Queue, -3*ms-15*us
	r.CachedTokens, r.CachedReported = 384, true
	r.Inputs = record.PredictionInputs{Set: true, PromptTokens: 530, InFlight: 1, Waiting: 1, WaitingKnown: true,
		Backlog: 12500 * us, Ahead: 1500 * us, PrefixTokens: 400, PrefixDistance: 9216}
}}

// probeFixture is a request a least_ttft pool sent as a probe: to an
// upstream nothing had been measured on for a while, past its prediction
// (2 s, where it took 45 ms). Kept out as routedFixture is.
var probeFixture = fixture{"stop_least_ttft_probe", func(r *record.Record) {
	engineReportStream(r, 8)
	r.Policy, r.Probe, r.Predicted = "least_ttft", true, true
	r.Prediction[stages.Queue] = 2 * time.Second
	r.PredictionOff, r.PredictionOffBy = stages.Queue, 2*time.Second-5*ms
	r.Inputs = record.PredictionInputs{Set: true, PromptTokens: 530}
}}

// allFixtures is fixtures plus the ones kept apart.
func allFixtures() []fixture { return append(fixtures[:len(fixtures):len(fixtures)], bufferedFixture) }

// loggedFixtures are the fixtures with a log golden.
func loggedFixtures() []fixture {
	return append(allFixtures(), reasoningFixture, routedFixture, probeFixture)
}

// build returns a fresh record for f.
func (f fixture) record() *record.Record {
	r := new(record.Record)
	f.build(r)
	return r
}
