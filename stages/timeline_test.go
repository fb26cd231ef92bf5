package stages

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// fakeClock is a Clock the test moves by hand.
type fakeClock struct{ now int64 }

func (c *fakeClock) read() int64             { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now += int64(d) }

// newTimeline starts a Timeline on a fake clock that reads base at Received,
// so offsets never coincide with raw clock readings.
func newTimeline(base int64) (*Timeline, *fakeClock) {
	c := &fakeClock{now: base}
	var tl Timeline
	tl.Start(c.read, time.Unix(1700000000, 0))
	return &tl, c
}

func TestStartMarksReceived(t *testing.T) {
	wall := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	c := &fakeClock{now: 1e12}
	var tl Timeline
	tl.Start(c.read, wall)
	if !tl.Has(Received) {
		t.Fatal("Received not set after Start")
	}
	if d, ok := tl.At(Received); !ok || d != 0 {
		t.Fatalf("At(Received) = %v, %v; want 0, true", d, ok)
	}
	if !tl.Wall().Equal(wall) {
		t.Fatalf("Wall() = %v, want %v", tl.Wall(), wall)
	}
	for m := GatewayDone; m < NumMarks; m++ {
		if tl.Has(m) {
			t.Errorf("%v set right after Start", m)
		}
	}
	if tl.EngineReported() {
		t.Error("EngineReported right after Start")
	}
	c.advance(1500 * time.Microsecond)
	if got := tl.Now(); got != 1500*time.Microsecond {
		t.Fatalf("Now() = %v, want 1.5ms (offset from Start, not the raw clock)", got)
	}
}

func TestMarkFirstWins(t *testing.T) {
	tl, c := newTimeline(42)
	c.advance(3 * time.Millisecond)
	tl.Mark(FirstEvent)
	c.advance(5 * time.Millisecond)
	tl.Mark(FirstEvent) // a second observation must not move the mark
	if d, ok := tl.At(FirstEvent); !ok || d != 3*time.Millisecond {
		t.Fatalf("At(FirstEvent) = %v, %v; want 3ms, true", d, ok)
	}
	// Received is set by Start; Mark(Received) later must not move it.
	tl.Mark(Received)
	if d, _ := tl.At(Received); d != 0 {
		t.Fatalf("Mark(Received) moved Received to %v", d)
	}
}

func TestMarkAtOverwrites(t *testing.T) {
	tl, c := newTimeline(7)
	c.advance(time.Millisecond)
	tl.Mark(LastToken)
	tl.MarkAt(LastToken, 9*time.Millisecond)
	tl.MarkAt(LastToken, 4*time.Millisecond) // later call wins, even if earlier in time
	if d, ok := tl.At(LastToken); !ok || d != 4*time.Millisecond {
		t.Fatalf("At(LastToken) = %v, %v; want 4ms, true", d, ok)
	}
	// MarkAt on an unset mark sets it; Mark afterwards does not move it.
	tl.MarkAt(Done, 20*time.Millisecond)
	c.advance(time.Hour)
	tl.Mark(Done)
	if d, ok := tl.At(Done); !ok || d != 20*time.Millisecond {
		t.Fatalf("At(Done) = %v, %v; want 20ms, true", d, ok)
	}
}

func TestStartResets(t *testing.T) {
	tl, c := newTimeline(100)
	c.advance(time.Second)
	for m := GatewayDone; m < NumMarks; m++ {
		tl.Mark(m)
	}
	for d := EngineQueue; d < NumEngineDurs; d++ {
		tl.SetEngine(d, time.Millisecond)
	}
	c2 := &fakeClock{now: 5000}
	wall := time.Unix(1800000000, 0)
	tl.Start(c2.read, wall)
	for m := GatewayDone; m < NumMarks; m++ {
		if tl.Has(m) {
			t.Errorf("%v survived Start", m)
		}
		if d, _ := tl.At(m); d != 0 {
			t.Errorf("%v offset %v survived Start", m, d)
		}
	}
	for d := EngineQueue; d < NumEngineDurs; d++ {
		if v, ok := tl.Engine(d); ok || v != 0 {
			t.Errorf("engine %v = %v, %v survived Start", d, v, ok)
		}
	}
	if tl.EngineReported() {
		t.Error("EngineReported survived Start")
	}
	if !tl.Wall().Equal(wall) {
		t.Errorf("Wall = %v, want %v", tl.Wall(), wall)
	}
	c2.advance(2 * time.Millisecond)
	tl.Mark(Routed)
	if d, _ := tl.At(Routed); d != 2*time.Millisecond {
		t.Errorf("after restart Routed = %v, want 2ms (new clock, new origin)", d)
	}
	if bd := tl.Breakdown(); bd.OK {
		t.Errorf("Breakdown OK after restart without FirstTokenFlushed: %+v", bd)
	}
}

func TestEngine(t *testing.T) {
	tl, _ := newTimeline(0)
	tests := []struct {
		d EngineDur
		v time.Duration
	}{
		{EngineQueue, 0}, // zero is reported, not missing
		{EngineTokenize, -time.Millisecond},
		{EngineMedia, math.MaxInt64},
		{EnginePrefill, 5 * time.Millisecond},
		{EngineSync, time.Millisecond},
		{EngineFirstDecode, time.Nanosecond},
		{EngineRecv, 2 * time.Millisecond},
		{EngineEmit, 3 * time.Microsecond},
	}
	for i, tc := range tests {
		if _, ok := tl.Engine(tc.d); ok {
			t.Fatalf("%v reported before SetEngine", tc.d)
		}
		tl.SetEngine(tc.d, tc.v)
		if !tl.EngineReported() {
			t.Fatalf("EngineReported false after SetEngine(%v)", tc.d)
		}
		for j, tc2 := range tests[:i+1] {
			if v, ok := tl.Engine(tc2.d); !ok || v != tc2.v {
				t.Errorf("after %d sets: Engine(%v) = %v, %v; want %v (raw), true", i+1, tests[j].d, v, ok, tc2.v)
			}
		}
	}
	tl.SetEngine(EnginePrefill, 9*time.Millisecond)
	if v, _ := tl.Engine(EnginePrefill); v != 9*time.Millisecond {
		t.Errorf("SetEngine did not overwrite: %v", v)
	}
}

func TestNames(t *testing.T) {
	want := []string{"received", "gateway_done", "routed", "admitted", "upstream_connected", "upstream_sent", "upstream_headers",
		"first_event", "first_token_arrived", "first_token", "first_token_flushed", "first_answer", "last_token", "done"}
	if int(NumMarks) != len(want) {
		t.Fatalf("NumMarks = %d, want %d", NumMarks, len(want))
	}
	for i, w := range want {
		if got := Mark(i).String(); got != w {
			t.Errorf("Mark(%d) = %q, want %q", i, got, w)
		}
	}
	if got := NumMarks.String(); got != "mark?" {
		t.Errorf("NumMarks.String() = %q", got)
	}
	engines := []string{"queue", "tokenize", "media", "prefill", "sync", "first_decode", "recv", "emit", "unread", "load"}
	if int(NumEngineDurs) != len(engines) {
		t.Fatalf("NumEngineDurs = %d, want %d", NumEngineDurs, len(engines))
	}
	for i, w := range engines {
		if got := EngineDur(i).String(); got != w {
			t.Errorf("EngineDur(%d) = %q, want %q", i, got, w)
		}
	}
	if got := NumEngineDurs.String(); got != "engine?" {
		t.Errorf("NumEngineDurs.String() = %q", got)
	}
	stageNames := []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport"}
	for i, w := range stageNames {
		if got := Stage(i).String(); got != w {
			t.Errorf("Stage(%d) = %q, want %q", i, got, w)
		}
	}
	if got := NumStages.String(); got != "stage?" {
		t.Errorf("NumStages.String() = %q", got)
	}
}

func TestMonotonic(t *testing.T) {
	a := Monotonic()
	time.Sleep(time.Millisecond)
	b := Monotonic()
	if b-a < int64(time.Millisecond) {
		t.Fatalf("Monotonic advanced %v over a 1ms sleep", time.Duration(b-a))
	}
}

const ms = time.Millisecond

// marks builds a Timeline from mark offsets and engine durations.
func build(marks map[Mark]time.Duration, engine map[EngineDur]time.Duration) *Timeline {
	tl, _ := newTimeline(1 << 40)
	for m, d := range marks {
		tl.MarkAt(m, d)
	}
	for d, v := range engine {
		tl.SetEngine(d, v)
	}
	return tl
}

func TestBreakdownTable(t *testing.T) {
	full := map[Mark]time.Duration{
		GatewayDone: 1 * ms, Routed: 3 * ms, Admitted: 10 * ms, UpstreamConnected: 10*ms + 400*time.Microsecond, UpstreamSent: 11 * ms,
		UpstreamHeaders: 12 * ms, FirstEvent: 13 * ms, FirstToken: 100 * ms, FirstTokenFlushed: 102 * ms,
	}
	with := func(base map[Mark]time.Duration, m Mark, d time.Duration) map[Mark]time.Duration {
		out := map[Mark]time.Duration{}
		for k, v := range base {
			out[k] = v
		}
		if d < 0 {
			delete(out, m)
		} else {
			out[m] = d
		}
		return out
	}
	const gone = -1
	type st = [NumStages]time.Duration
	tests := []struct {
		name   string
		marks  map[Mark]time.Duration
		engine map[EngineDur]time.Duration
		want   Breakdown
	}{
		{"no first token flushed", with(full, FirstTokenFlushed, gone), nil, Breakdown{}},
		{"no first token flushed, engine reported", with(full, FirstTokenFlushed, gone),
			map[EngineDur]time.Duration{EnginePrefill: 5 * ms}, Breakdown{}},
		{"unsplit", full, nil, Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms,
			Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms, Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"all engine parts", full, map[EngineDur]time.Duration{
			EngineQueue: 20 * ms, EngineTokenize: 3 * ms, EngineMedia: 4 * ms, EnginePrefill: 40 * ms,
			EngineSync: 5 * ms, EngineFirstDecode: 8 * ms,
		}, Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 27 * ms,
			Preparation: 7 * ms, Prefill: 40 * ms, FirstDecode: 8 * ms, Unattributed: 14 * ms, Transport: 3 * ms}}},
		{"recv and emit", full, map[EngineDur]time.Duration{
			EngineQueue: 20 * ms, EngineTokenize: 3 * ms, EngineMedia: 4 * ms, EnginePrefill: 40 * ms,
			EngineFirstDecode: 8 * ms, EngineRecv: 2 * ms, EngineEmit: 5 * ms,
		}, Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 27 * ms,
			Preparation: 9 * ms, Prefill: 40 * ms, FirstDecode: 13 * ms, Unattributed: 7 * ms, Transport: 3 * ms}}},
		{"unread counts as queue", full, map[EngineDur]time.Duration{EngineQueue: 20 * ms, EngineUnread: 3 * ms, EnginePrefill: 40 * ms},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 30 * ms,
				Prefill: 40 * ms, Unattributed: 26 * ms, Transport: 3 * ms}}},
		{"recv and emit alone", full, map[EngineDur]time.Duration{EngineRecv: 2 * ms, EngineEmit: 5 * ms},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Preparation: 2 * ms, FirstDecode: 5 * ms, Unattributed: 82 * ms, Transport: 3 * ms}}},
		{"emit does not fit: clamped, the older parts kept", full, map[EngineDur]time.Duration{EnginePrefill: 85 * ms, EngineEmit: 6 * ms},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Prefill: 85 * ms, FirstDecode: 5 * ms, Transport: 2 * ms}}},
		{"engine leaves less than the send: send clamped, not flagged", full, map[EngineDur]time.Duration{EnginePrefill: 89*ms + 600*time.Microsecond},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Prefill: 89*ms + 600*time.Microsecond, Transport: 2*ms + 400*time.Microsecond}}},
		{"connected, not sent: the connect counts", with(full, UpstreamSent, gone), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Unattributed: 89*ms + 600*time.Microsecond, Transport: 2*ms + 400*time.Microsecond}}},
		{"the first token arrived before it was parsed: the parsing is transport", with(full, FirstTokenArrived, 99*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Unattributed: 88 * ms, Transport: 4 * ms}}},
		{"the first token arrived with the first event", with(with(full, FirstEvent, 99*ms), FirstTokenArrived, 99*ms),
			map[EngineDur]time.Duration{EnginePrefill: 80 * ms},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Prefill: 80 * ms, Unattributed: 8 * ms, Transport: 4 * ms}}},
		{"arrival before admitted is taken as admitted", with(full, FirstTokenArrived, 5*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Transport: 92 * ms}}},
		{"arrival after the first token is taken as the first token", with(full, FirstTokenArrived, 101*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"sent before admitted: no send", with(full, UpstreamSent, 9*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Unattributed: 90 * ms, Transport: 2 * ms}}},
		{"engine exactly fills window", full, map[EngineDur]time.Duration{EngineQueue: 50 * ms, EnginePrefill: 40 * ms},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 57 * ms,
				Prefill: 40 * ms, Transport: 2 * ms}}},
		{"zero engine report is a report", full, map[EngineDur]time.Duration{EnginePrefill: 0},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms, Queue: 7 * ms,
				Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"prefill oversized: clamped", full, map[EngineDur]time.Duration{EngineQueue: 10 * ms, EnginePrefill: time.Hour},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 17 * ms, Prefill: 80 * ms, Transport: 2 * ms}}},
		{"parts one ns over window", full, map[EngineDur]time.Duration{EngineQueue: 45 * ms, EnginePrefill: 45*ms + 1},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 52 * ms, Prefill: 45 * ms, Transport: 2 * ms}}},
		{"negative tokenize clamped to zero", full, map[EngineDur]time.Duration{EngineTokenize: -ms, EnginePrefill: 30 * ms},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Prefill: 30 * ms, Unattributed: 59 * ms, Transport: 3 * ms}}},
		{"sync larger than prefill", full, map[EngineDur]time.Duration{EnginePrefill: 30 * ms, EngineSync: 31 * ms},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Prefill: 30 * ms, Unattributed: 59 * ms, Transport: 3 * ms}}},
		{"sync equal to prefill", full, map[EngineDur]time.Duration{EnginePrefill: 30 * ms, EngineSync: 30 * ms},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Prefill: 30 * ms, Unattributed: 59 * ms, Transport: 3 * ms}}},
		{"negative sync", full, map[EngineDur]time.Duration{EngineSync: -1},
			Breakdown{OK: true, Inconsistent: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"sync alone, zero", full, map[EngineDur]time.Duration{EngineSync: 0},
			Breakdown{OK: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"missing gateway_done: zero gateway stage", with(full, GatewayDone, gone), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Route: 3 * ms, Queue: 7 * ms,
				Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"missing routed and admitted: zero route and queue", with(with(full, Routed, gone), Admitted, gone), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms,
				Unattributed: 89 * ms, Transport: 12 * ms}}},
		{"missing first_token: upstream window ends at first_event", with(full, FirstToken, gone), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Unattributed: 2 * ms, Transport: 90 * ms}}},
		{"only flushed", map[Mark]time.Duration{FirstTokenFlushed: 5 * ms}, nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 5 * ms, Stages: st{Transport: 5 * ms}}},
		{"only flushed, engine reported: window is empty", map[Mark]time.Duration{FirstTokenFlushed: 5 * ms},
			map[EngineDur]time.Duration{EnginePrefill: 1 * ms},
			Breakdown{OK: true, Inconsistent: true, TTFT: 5 * ms, Stages: st{Transport: 5 * ms}}},
		{"flushed at zero", map[Mark]time.Duration{FirstToken: 0, FirstTokenFlushed: 0}, nil,
			Breakdown{OK: true, Unsplit: true}},
		{"out of order: routed before gateway_done", with(full, Routed, 500*time.Microsecond), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 0,
				Queue: 9 * ms, Unattributed: 89 * ms, Transport: 3 * ms}}},
		{"out of order: first token after flush", with(full, FirstToken, 200*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Unattributed: 91 * ms, Transport: 1 * ms}}},
		{"marks after first token do not matter", with(with(full, LastToken, 5*ms), Done, 1*ms), nil,
			Breakdown{OK: true, Unsplit: true, TTFT: 102 * ms, Stages: st{Gateway: 1 * ms, Route: 2 * ms,
				Queue: 7 * ms, Unattributed: 89 * ms, Transport: 3 * ms}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := build(tc.marks, tc.engine).Breakdown()
			got.Parts = [NumEngineDurs]time.Duration{} // TestBreakdownProperty checks them
			if got != tc.want {
				t.Errorf("Breakdown:\n got %s\nwant %s", fmtBreakdown(got), fmtBreakdown(tc.want))
			}
		})
	}
}

// TestBreakdownNegativeTTFT pins the promise "never a negative stage" when the
// flush offset itself is negative (a MarkAt with an offset computed on another
// clock, or a clock that stepped back between Start and the flush).
func TestBreakdownNegativeTTFT(t *testing.T) {
	tests := []struct {
		name  string
		marks map[Mark]time.Duration
	}{
		{"flushed only", map[Mark]time.Duration{FirstTokenFlushed: -ms}},
		{"with gateway", map[Mark]time.Duration{GatewayDone: 2 * ms, FirstTokenFlushed: -ms}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bd := build(tc.marks, nil).Breakdown()
			checkInvariants(t, bd)
		})
	}
	t.Run("clock stepped back", func(t *testing.T) {
		tl, c := newTimeline(1000)
		c.advance(-time.Microsecond)
		tl.Mark(FirstTokenFlushed)
		checkInvariants(t, tl.Breakdown())
	})
}

func checkInvariants(t *testing.T, bd Breakdown) {
	t.Helper()
	if !bd.OK {
		return
	}
	var sum time.Duration
	for s, d := range bd.Stages {
		if d < 0 {
			t.Errorf("stage %v = %v < 0 (%s)", Stage(s), d, fmtBreakdown(bd))
		}
		sum += d
	}
	if sum != bd.TTFT {
		t.Errorf("stages sum %v != TTFT %v (%s)", sum, bd.TTFT, fmtBreakdown(bd))
	}
	if bd.TTFT < 0 {
		t.Errorf("TTFT %v < 0", bd.TTFT)
	}
}

func fmtBreakdown(b Breakdown) string {
	s := ""
	for i, d := range b.Stages {
		s += Stage(i).String() + "=" + d.String() + " "
	}
	return s + "ttft=" + b.TTFT.String() + " ok=" + boolStr(b.OK) + " unsplit=" + boolStr(b.Unsplit) +
		" inconsistent=" + boolStr(b.Inconsistent)
}

func boolStr(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// satAdd adds non-negative durations without overflowing.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// randEngine draws an engine duration from a mix that covers the edges.
func randEngine(r *rand.Rand, scale time.Duration) time.Duration {
	switch r.IntN(12) {
	case 0:
		return 0
	case 1:
		return -time.Duration(r.Int64N(int64(scale)) + 1)
	case 2:
		return time.Duration(math.MinInt64)
	case 3:
		return time.Duration(math.MaxInt64)
	case 4:
		return scale * time.Duration(2+r.IntN(1000)) // oversized
	case 5:
		return -1
	default:
		return time.Duration(r.Int64N(int64(scale) / int64(NumEngineDurs)))
	}
}

// TestBreakdownProperty checks Breakdown over random timelines against an
// oracle written from the formulas in ARCHITECTURE.md, independent of the implementation's
// sequential carving.
func TestBreakdownProperty(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 0xdeadbeef, 20240501} {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var nOK, nIncons, nUnsplit, nOOO, nSplit int
		for i := range 7000 {
			tl, _ := newTimeline(int64(r.Uint32()))
			// Mostly increasing offsets over a random subset of marks.
			var set [NumMarks]bool
			var off [NumMarks]time.Duration
			outOfOrder := r.IntN(8) == 0
			cur := time.Duration(0)
			for m := GatewayDone; m < NumMarks; m++ {
				if r.IntN(4) == 0 && !(m == FirstTokenFlushed && r.IntN(4) != 0) {
					continue // missing (FirstTokenFlushed present most of the time)
				}
				step := time.Duration(r.Int64N(int64(50 * ms)))
				if r.IntN(10) == 0 {
					step = 0 // equal marks
				}
				cur += step
				d := cur
				if outOfOrder && r.IntN(3) == 0 {
					d = time.Duration(r.Int64N(int64(cur) + 1)) // somewhere before
					if r.IntN(3) == 0 {
						d = cur + time.Duration(r.Int64N(int64(time.Second))) // later than the rest
					}
				}
				set[m], off[m] = true, d
				tl.MarkAt(m, d)
			}
			var eset [NumEngineDurs]bool
			var eng [NumEngineDurs]time.Duration
			if r.IntN(5) != 0 {
				for d := EngineQueue; d < NumEngineDurs; d++ {
					if r.IntN(3) == 0 {
						continue
					}
					eset[d], eng[d] = true, randEngine(r, max(cur, ms))
					tl.SetEngine(d, eng[d])
				}
			}

			bd := tl.Breakdown()
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d case %d: "+format+"\nmarks set=%v off=%v\nengine set=%v val=%v\n%s",
					append(append([]any{seed, i}, args...), set, off, eset, eng, fmtBreakdown(bd))...)
			}
			if !set[FirstTokenFlushed] {
				if bd != (Breakdown{}) {
					fail("breakdown without FirstTokenFlushed is not zero")
				}
				continue
			}
			nOK++
			if !bd.OK {
				fail("not OK with FirstTokenFlushed set")
			}
			ttft := off[FirstTokenFlushed]
			if bd.TTFT != ttft {
				fail("TTFT %v, want %v", bd.TTFT, ttft)
			}
			var sum time.Duration
			for s, d := range bd.Stages {
				if d < 0 {
					fail("stage %v negative", Stage(s))
				}
				sum += d
			}
			if sum != ttft {
				fail("sum %v != TTFT %v", sum, ttft)
			}
			reported := false
			for _, ok := range eset {
				reported = reported || ok
			}
			if bd.Unsplit != !reported {
				fail("Unsplit = %v, engine reported = %v", bd.Unsplit, reported)
			}
			if !reported {
				nUnsplit++
			}

			// Oracle for the proxy marks: a missing mark takes the value of
			// the closest recorded one before it (Received = 0); recorded
			// values are then forced non-decreasing and capped at TTFT.
			eff := func(m Mark) time.Duration {
				for k := m; k > Received; k-- {
					if set[k] {
						return off[k]
					}
				}
				return 0
			}
			order := []Mark{GatewayDone, Routed, Admitted, FirstToken}
			var v [4]time.Duration
			monotone := true
			lo := time.Duration(0)
			for j, m := range order {
				x := eff(m)
				if x < lo || x > ttft {
					monotone = false
				}
				x = min(max(x, lo), ttft)
				v[j], lo = x, x
			}
			if !monotone {
				nOOO++
			}
			gd, ro, ad, ft := v[0], v[1], v[2], v[3]
			// The window ends when the first token arrived, when that is
			// known (within admitted and first token).
			arr := ft
			if set[FirstTokenArrived] {
				arr = min(max(off[FirstTokenArrived], ad), ft)
			}
			// The proxy's send, from admitted to the send (or the latest
			// mark before it), gets what the engine's parts leave of the
			// window.
			send := max(eff(UpstreamSent)-ad, 0)
			if bd.Stages[Gateway] != gd || bd.Stages[Route] != ro-gd || bd.Stages[Transport] < ttft-arr {
				fail("proxy stages: want gateway %v route %v transport >= %v", gd, ro-gd, ttft-arr)
			}
			gotSend := bd.Stages[Transport] - (ttft - arr)
			if gotSend > send {
				fail("transport holds a send of %v, more than the proxy's %v", gotSend, send)
			}

			// Oracle for Inconsistent: an engine part is negative, the
			// reported parts do not fit the upstream window together, or sync
			// is negative or larger than the prefill it is part of.
			window := arr - ad
			var parts time.Duration
			neg := false
			for _, d := range []EngineDur{EngineLoad, EngineQueue, EngineTokenize, EngineMedia, EnginePrefill, EngineFirstDecode, EngineRecv, EngineEmit, EngineUnread} {
				if !eset[d] {
					continue
				}
				if eng[d] < 0 {
					neg = true
					continue
				}
				parts = satAdd(parts, eng[d])
			}
			prefill := time.Duration(0)
			if eset[EnginePrefill] {
				prefill = eng[EnginePrefill]
			}
			syncBad := eset[EngineSync] && (eng[EngineSync] < 0 || eng[EngineSync] > prefill)
			wantIncons := neg || parts > window || syncBad
			if bd.Inconsistent != wantIncons {
				fail("Inconsistent = %v, oracle %v (neg %v, parts %v > window %v, syncBad %v)",
					bd.Inconsistent, wantIncons, neg, parts, window, syncBad)
			}
			var inStage [NumStages + 1]time.Duration
			for d, v := range bd.Parts {
				if v < 0 {
					fail("part %v negative", EngineDur(d))
				}
				inStage[EngineDur(d).Stage()] += v
			}
			if inStage[NumStages] != 0 {
				fail("sync carved as a part of its own")
			}
			for st := range NumStages {
				if inStage[st] > bd.Stages[st] {
					fail("parts of %v (%v) exceed it", st, inStage[st])
				}
			}
			if wantIncons {
				nIncons++
				// Engine stages can only have shrunk, and fit the window
				// with the send and unattributed.
				if bd.Stages[Queue]-(ad-ro)+bd.Stages[Preparation]+bd.Stages[Prefill]+bd.Stages[FirstDecode]+bd.Stages[Unattributed]+gotSend != window {
					fail("engine stages do not fill the window %v", window)
				}
				continue
			}
			get := func(d EngineDur) time.Duration {
				if eset[d] {
					return eng[d]
				}
				return 0
			}
			send = min(send, window-parts)
			want := [NumStages]time.Duration{
				Gateway:      gd,
				Route:        ro - gd,
				Queue:        ad - ro + get(EngineLoad) + get(EngineQueue) + get(EngineUnread),
				Preparation:  get(EngineRecv) + get(EngineTokenize) + get(EngineMedia),
				Prefill:      get(EnginePrefill),
				FirstDecode:  get(EngineFirstDecode) + get(EngineEmit),
				Unattributed: window - parts - send,
				Transport:    ttft - arr + send,
			}
			if bd.Stages != want {
				fail("consistent report: stages differ from the formula, want %v", want)
			}
			for d := range NumEngineDurs {
				if w := get(d); d != EngineSync && bd.Parts[d] != w {
					fail("part %v = %v, want %v as reported", d, bd.Parts[d], w)
				}
			}
			if reported {
				nSplit++
			}
		}
		if nOK < 3000 || nIncons < 450 || nUnsplit < 450 || nOOO < 150 || nSplit < 80 {
			t.Errorf("seed %d: weak coverage: ok %d inconsistent %d unsplit %d out-of-order %d consistent split %d",
				seed, nOK, nIncons, nUnsplit, nOOO, nSplit)
		}
	}
}

func TestInferEngine(t *testing.T) {
	tl, _ := newTimeline(0)
	tl.InferEngine(EngineQueue, 7*ms)
	if v, ok := tl.Engine(EngineQueue); !ok || v != 7*ms {
		t.Errorf("Engine(queue) = %v, %v after InferEngine", v, ok)
	}
	if tl.EngineReported() {
		t.Error("an inferred duration counts as reported")
	}
	if got := tl.Inferred(); got != EngineSet(0).With(EngineQueue) {
		t.Errorf("Inferred = %b", got)
	}
	tl.SetEngine(EnginePrefill, ms)
	if !tl.EngineReported() || !tl.Inferred().Has(EngineQueue) || tl.Inferred().Has(EnginePrefill) {
		t.Errorf("after a reported prefill: reported %v, inferred %b", tl.EngineReported(), tl.Inferred())
	}
	tl.SetEngine(EngineQueue, 2*ms) // a report replaces an inference
	if tl.Inferred() != 0 {
		t.Errorf("Inferred = %b after the queue was reported", tl.Inferred())
	}
	tl.Start(tl.clock, time.Time{})
	if tl.Inferred() != 0 {
		t.Error("Inferred survived Start")
	}
}

func TestEngineSetJSON(t *testing.T) {
	tests := []struct {
		set  EngineSet
		want string
	}{
		{0, `[]`},
		{EngineSet(0).With(EngineQueue), `["queue"]`},
		{EngineSet(0).With(EngineLoad).With(EngineQueue), `["queue","load"]`},
	}
	for _, tc := range tests {
		if got := string(tc.set.AppendJSON(nil)); got != tc.want {
			t.Errorf("%b: %s, want %s", tc.set, got, tc.want)
		}
	}
}

func TestEngineStage(t *testing.T) {
	want := map[EngineDur]Stage{EngineQueue: Queue, EngineUnread: Queue, EngineLoad: Queue, EngineTokenize: Preparation,
		EngineMedia: Preparation, EngineRecv: Preparation, EnginePrefill: Prefill, EngineFirstDecode: FirstDecode,
		EngineEmit: FirstDecode, EngineSync: NumStages, NumEngineDurs: NumStages}
	for d, s := range want {
		if got := d.Stage(); got != s {
			t.Errorf("%v.Stage() = %v, want %v", d, got, s)
		}
	}
}
