package exporters

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/logtest"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// timed is a minimal record with the given TTFT (0: no first token) that
// ends at done.
func timed(id string, ttft, done time.Duration) *record.Record {
	r := new(record.Record)
	r.Timeline.Start(fixedClock, wall)
	r.RequestID = id
	r.Timeline.MarkAt(stages.GatewayDone, 10*us)
	r.Timeline.MarkAt(stages.Routed, 20*us)
	r.Timeline.MarkAt(stages.Admitted, 30*us)
	if ttft > 0 {
		r.Timeline.MarkAt(stages.FirstToken, ttft-5*us)
		r.Timeline.MarkAt(stages.FirstTokenFlushed, ttft)
		r.Timeline.MarkAt(stages.LastToken, done-us)
		r.Reason, r.Detail = endreason.Stop, endreason.DetailStop
	} else {
		r.Reason, r.Detail = endreason.Deadline, endreason.DetailTTFTDeadline
	}
	r.Timeline.MarkAt(stages.Done, done)
	return r
}

func ids(rs []record.Record) string {
	var b []string
	for _, r := range rs {
		b = append(b, r.RequestID)
	}
	return strings.Join(b, ",")
}

func TestRingRecentAndSlowest(t *testing.T) {
	tests := []struct {
		name            string
		recent, slowest int
		ttfts           []time.Duration // request i is "r<i>"; 0 = no first token
		limit           int
		wantRecent      string
		wantSlowest     string
	}{
		{"empty", 3, 2, nil, 0, "", ""},
		{"fewer than sizes", 3, 2, []time.Duration{5 * ms}, 0, "r0", "r0"},
		{"recent wraps, newest first", 3, 2, []time.Duration{1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms}, 0, "r4,r3,r2", "r4,r3"},
		{"slowest since start, not only the window", 2, 2, []time.Duration{90 * ms, 80 * ms, 1 * ms, 2 * ms, 3 * ms}, 0, "r4,r3", "r0,r1"},
		{"slowest replaces the least slow", 5, 3, []time.Duration{5 * ms, 1 * ms, 7 * ms, 3 * ms, 6 * ms}, 0, "r4,r3,r2,r1,r0", "r2,r4,r0"},
		{"ties: the later record ranks slower", 5, 2, []time.Duration{4 * ms, 4 * ms, 4 * ms}, 0, "r2,r1,r0", "r2,r1"},
		{"no first token ranks by its whole duration", 5, 2, []time.Duration{5 * ms, 0, 1 * ms}, 0, "r2,r1,r0", "r1,r0"},
		{"limit", 5, 5, []time.Duration{1 * ms, 2 * ms, 3 * ms}, 2, "r2,r1", "r2,r1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewRing(RingOptions{Recent: tt.recent, Slowest: tt.slowest})
			for i, ttft := range tt.ttfts {
				done := ttft + 10*ms
				if ttft == 0 {
					done = 50 * ms
				}
				g.Emit(timed(fmt.Sprintf("r%d", i), ttft, done))
			}
			if got := ids(g.Recent(nil, tt.limit)); got != tt.wantRecent {
				t.Errorf("recent %q, want %q", got, tt.wantRecent)
			}
			if got := ids(g.Slowest(nil, tt.limit)); got != tt.wantSlowest {
				t.Errorf("slowest %q, want %q", got, tt.wantSlowest)
			}
			if g.Total() != uint64(len(tt.ttfts)) {
				t.Errorf("total %d, want %d", g.Total(), len(tt.ttfts))
			}
		})
	}
}

// TestRingCopies checks that the ring keeps its own copy: reusing the
// record (as the proxy's pool does) does not change what was kept.
func TestRingCopies(t *testing.T) {
	g := NewRing(RingOptions{})
	r := fixtures[0].record()
	g.Emit(r)
	want := g.Recent(nil, 1)[0]
	r.Reset()
	r.Timeline.Start(fixedClock, wall)
	r.RequestID = "other"
	r.Stream.Content(time.Hour, 0)
	r.Stream.Content(2*time.Hour, 0)
	got, ok := g.Lookup("req-0001")
	if !ok || got.RequestID != "req-0001" || got.Stream.Gaps() != want.Stream.Gaps() || got.Breakdown() != want.Breakdown() {
		t.Fatalf("kept record changed after the record was reused: %+v", got)
	}
	if got.Stream.Gaps().N != 199 || !got.Breakdown().OK {
		t.Fatalf("kept record lost data: gaps %+v breakdown %+v", got.Stream.Gaps(), got.Breakdown())
	}
}

func TestSegments(t *testing.T) {
	const predicted = " queue:predicted preparation:predicted prefill:predicted first_decode:predicted unattributed:predicted transport:predicted"
	tests := []struct {
		name, fixture string
		edit          func(r *record.Record) // nil: the fixture as it is
		want          string                 // name:kind, in order
	}{
		{"", "stop_engine_report", nil, "gateway:stage route:stage queue:stage preparation:stage prefill:stage first_decode:stage unattributed:stage transport:stage decode:decode finish:finish"},
		{"", "client_cancel_mid_stream", nil, "gateway:stage route:stage queue:stage preparation:stage prefill:stage first_decode:stage unattributed:stage transport:stage decode:decode finish:finish"},
		{"", "deadline_before_first_token", nil, "gateway:stage route:stage queue:stage upstream:open"},
		{"", "worker_failure_5xx", nil, "gateway:stage route:stage queue:stage upstream:open"},
		{"", "reasoning_stream", nil, "gateway:stage route:stage queue:stage queue:stage:inferred preparation:stage prefill:stage first_decode:stage unattributed:stage transport:stage reasoning:decode decode:decode finish:finish"},
		// A least_ttft pool's prediction follows the measured bars.
		{"", "stop_least_ttft", nil, "gateway:stage route:stage queue:stage preparation:stage prefill:stage first_decode:stage unattributed:stage transport:stage decode:decode finish:finish" + predicted},
		// A prediction without a first token is still drawn: it was made,
		// and shows what the request was expected to wait.
		{"predicted, no first token", "deadline_before_first_token", predict, "gateway:stage route:stage queue:stage upstream:open" + predicted},
		{"predicted, ended in route", "deadline_before_first_token", func(r *record.Record) {
			predict(r)
			r.Timeline.Start(fixedClock, wall)
			r.Timeline.MarkAt(stages.GatewayDone, 41234)
			r.Timeline.MarkAt(stages.Done, 90*us)
		}, "gateway:stage route:open" + predicted},
		{"predicted, unsplit", "stop_unsplit", func(r *record.Record) {
			r.Predicted = true
			r.Prediction[stages.Unattributed] = 40 * ms
		}, "gateway:stage route:stage queue:stage preparation:stage prefill:stage first_decode:stage unattributed:stage transport:stage decode:decode finish:finish" + predicted},
	}
	for _, tt := range tests {
		name := tt.name
		if name == "" {
			name = tt.fixture
		}
		t.Run(name, func(t *testing.T) {
			r := fixtureByName(t, tt.fixture)
			if tt.edit != nil {
				tt.edit(r)
			}
			segs := Segments(nil, r)
			var names []string
			for _, g := range segs {
				names = append(names, g.Name+":"+g.Kind.String())
				if g.Inferred {
					names[len(names)-1] += ":inferred"
				}
				if g.Dur() < 0 {
					t.Errorf("segment %s negative: %v", g.Name, g.Dur())
				}
			}
			if got := strings.Join(names, " "); got != tt.want {
				t.Fatalf("segments\n got %s\nwant %s", got, tt.want)
			}
			if len(segs) > maxSegments {
				t.Errorf("%d segments, more than maxSegments %d", len(segs), maxSegments)
			}
			checkLayout(t, r, segs)
			checkPrediction(t, r, segs)
		})
	}
	t.Run("a model load and an inferred queue", func(t *testing.T) {
		r := fixtureByName(t, "reasoning_stream") // its queue inferred: 9 ms
		r.Timeline.SetEngine(stages.EngineLoad, 20*ms)
		r.Timeline.SetEngine(stages.EnginePrefill, 5*ms)
		segs := Segments(nil, r)
		bd := r.Breakdown()
		want := []Segment{
			{Name: "queue", Kind: SegStage, Start: segs[1].End, End: segs[1].End + bd.Stages[stages.Queue] - 29*ms},
			{Name: "load", Kind: SegStage, Start: segs[2].End, End: segs[2].End + 20*ms},
			{Name: "queue", Kind: SegStage, Inferred: true, Start: segs[3].End, End: segs[3].End + 9*ms},
		}
		if !slices.Equal(segs[2:5], want) || segs[5].Name != "preparation" {
			t.Fatalf("segments %+v", segs)
		}
		checkLayout(t, r, segs)
	})
	t.Run("rejected at the gateway", func(t *testing.T) {
		r := new(record.Record)
		r.Timeline.Start(fixedClock, wall)
		r.Timeline.MarkAt(stages.Done, 70*us)
		segs := Segments(nil, r)
		if len(segs) != 1 || segs[0] != (Segment{Name: "gateway", Kind: SegOpen, Start: 0, End: 70 * us}) {
			t.Fatalf("segments %+v", segs)
		}
	})
}

// checkLayout asserts the waterfall's shape: TTFT stages contiguous from 0
// and ending at TTFT; without a first token, contiguous up to Done.
func checkLayout(t *testing.T, r *record.Record, segs []Segment) {
	t.Helper()
	var at time.Duration
	var stageSum time.Duration
	for _, g := range segs {
		if g.Kind == SegStage || g.Kind == SegOpen {
			if g.Start != at {
				t.Errorf("segment %s starts at %v, want %v (contiguous)", g.Name, g.Start, at)
			}
			at = g.End
			stageSum += g.Dur()
		}
	}
	if bd := r.Breakdown(); bd.OK {
		if stageSum != bd.TTFT {
			t.Errorf("stages sum %v != TTFT %v", stageSum, bd.TTFT)
		}
		return
	}
	if at != r.E2E() {
		t.Errorf("layout ends at %v, want Done %v", at, r.E2E())
	}
}

// predict gives r the prediction of stop_least_ttft, as a least_ttft pool
// would have routed it.
func predict(r *record.Record) {
	p := routedFixture.record()
	r.Policy, r.Predicted, r.Prediction = p.Policy, true, p.Prediction
}

// checkPrediction asserts the predicted bars: none without r.Predicted;
// with it, after the measured ones, queue to transport, each as long as
// predicted, end to end from where the measured route stage ended (with a
// first token, to the predicted TTFT).
func checkPrediction(t *testing.T, r *record.Record, segs []Segment) {
	t.Helper()
	var routed time.Duration
	first := len(segs)
	for i, g := range segs {
		if g.Kind == SegPredicted {
			first = min(first, i)
		} else if first < len(segs) {
			t.Errorf("measured segment %s after the predicted ones", g.Name)
		}
		if g.Name == "route" && (g.Kind == SegStage || g.Kind == SegOpen) {
			routed = g.End
		}
	}
	pred := segs[first:]
	if !r.Predicted {
		if len(pred) > 0 {
			t.Errorf("predicted segments %+v for a record without a prediction", pred)
		}
		return
	}
	if len(pred) != int(stages.NumStages-stages.Queue) {
		t.Fatalf("%d predicted segments, want queue to transport", len(pred))
	}
	at := routed
	for i, g := range pred {
		st := stages.Queue + stages.Stage(i)
		if want := (Segment{Name: st.String(), Kind: SegPredicted, Start: at, End: at + r.Prediction[st]}); g != want {
			t.Errorf("predicted segment %+v, want %+v", g, want)
		}
		at = g.End
	}
	if bd := r.Breakdown(); bd.OK && at != r.PredictedTTFT() {
		t.Errorf("prediction ends at %v, want the predicted TTFT %v", at, r.PredictedTTFT())
	}
}

func fixtureByName(t *testing.T, name string) *record.Record {
	t.Helper()
	for _, f := range loggedFixtures() {
		if f.name == name {
			return f.record()
		}
	}
	t.Fatalf("no fixture %q", name)
	return nil
}

func TestRingStats(t *testing.T) {
	g := NewRing(RingOptions{Recent: 100})
	for i := range 100 { // TTFT 1..100 ms
		g.Emit(timed(fmt.Sprintf("r%d", i), time.Duration(i+1)*ms, time.Duration(i+1)*ms+10*ms))
	}
	g.Emit(timed("dl", 0, 5*time.Second)) // pushes r0 out of the window
	st := g.Stats()
	if st.Window != 100 || st.FirstToken != 99 || st.Total != 101 {
		t.Fatalf("window %d first token %d total %d", st.Window, st.FirstToken, st.Total)
	}
	// TTFTs 2..100 ms (99 values): nearest rank p50 = 50th = 51 ms, p95 =
	// ceil(94.05) = 95th = 96 ms.
	if st.TTFT.P50 != 51*ms || st.TTFT.P95 != 96*ms {
		t.Errorf("ttft %+v", st.TTFT)
	}
	// transport is 5 µs everywhere; gateway 10 µs.
	if st.Stages[stages.Transport] != (Percentiles{5 * us, 5 * us}) || st.Stages[stages.Gateway] != (Percentiles{10 * us, 10 * us}) {
		t.Errorf("stages %+v", st.Stages)
	}
	if st.Reasons[endreason.Stop] != 99 || st.Reasons[endreason.Deadline] != 1 || st.ReasonsTotal[endreason.Stop] != 100 {
		t.Errorf("reasons %v total %v", st.Reasons, st.ReasonsTotal)
	}
	if st.E2E.P95 != 106*ms && st.E2E.P95 != 105*ms {
		t.Errorf("e2e %+v", st.E2E)
	}
}

// TestRingConcurrent runs writers and readers together (for -race).
func TestRingConcurrent(t *testing.T) {
	g := NewRing(RingOptions{Recent: 64, Slowest: 8})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				g.Emit(timed(fmt.Sprintf("w%d-%d", w, i), time.Duration(1+i%37)*ms, 50*ms))
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			g.Recent(nil, 10)
			g.Slowest(nil, 0)
			g.Stats()
			g.Lookup("w1-3")
		}
	})
	wg.Wait()
	if g.Total() != 2000 {
		t.Fatalf("total %d", g.Total())
	}
	if s := g.Slowest(nil, 0); len(s) != 8 || s[7].Breakdown().TTFT != 37*ms {
		t.Fatalf("slowest %d, last %v", len(s), s[len(s)-1].Breakdown().TTFT)
	}
}

// get runs h on a GET for uri and returns status and body.
func get(h fasthttp.RequestHandler, method, uri string) (int, string, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	h(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Header.ContentType()), string(ctx.Response.Body())
}

func TestRingEndpoints(t *testing.T) {
	g := NewRing(RingOptions{})
	for _, f := range fixtures {
		g.Emit(f.record()) // all share request id req-0001: Lookup returns the newest
	}
	slash := fixtures[0].record()
	slash.RequestID = "team/a:42"
	g.Emit(slash)
	admin := AdminHandler(prometheus.NewRegistry(), g.Routes())

	tests := []struct {
		name, method, uri string
		status            int
		check             func(t *testing.T, body string)
	}{
		{"list", "GET", "/debug/requests", 200, func(t *testing.T, body string) {
			var raw struct {
				Recent  []map[string]any `json:"recent"`
				Slowest []map[string]any `json:"slowest"`
				Agg     struct {
					Window  int                           `json:"window"`
					Stages  map[string]map[string]float64 `json:"stages_ms"`
					Reasons map[string]uint64             `json:"end_reasons"`
				} `json:"aggregates"`
			}
			if err := json.Unmarshal([]byte(body), &raw); err != nil {
				t.Fatal(err, body)
			}
			if len(raw.Recent) != 7 || raw.Recent[0]["request_id"] != "team/a:42" {
				t.Errorf("recent %v", raw.Recent)
			}
			if len(raw.Slowest) != 7 || raw.Slowest[0]["end_reason"] != "deadline" {
				t.Errorf("slowest[0] %v", raw.Slowest[0])
			}
			if raw.Agg.Window != 7 || raw.Agg.Reasons["stop"] != 3 || raw.Agg.Reasons["deadline"] != 1 || len(raw.Agg.Stages["p95"]) != 8 {
				t.Errorf("aggregates %+v", raw.Agg)
			}
			// The stage keys come in stage order.
			if i, j := strings.Index(body, `"gateway"`), strings.Index(body, `"transport"`); i < 0 || j < i {
				t.Errorf("stage order in %s", body)
			}
		}},
		{"limit", "GET", "/debug/requests?limit=2", 200, func(t *testing.T, body string) {
			var raw struct{ Recent, Slowest []map[string]any }
			if err := json.Unmarshal([]byte(body), &raw); err != nil || len(raw.Recent) != 2 || len(raw.Slowest) != 2 {
				t.Errorf("err %v recent %d slowest %d", err, len(raw.Recent), len(raw.Slowest))
			}
		}},
		{"bad limit", "GET", "/debug/requests?limit=-1", 400, nil},
		{"one", "GET", "/debug/requests/team/a:42", 200, func(t *testing.T, body string) {
			var r struct {
				ID        string             `json:"request_id"`
				TTFT      float64            `json:"ttft_ms"`
				Stages    map[string]float64 `json:"stages_ms"`
				Marks     map[string]float64 `json:"marks_ms"`
				Engine    map[string]float64 `json:"engine_ms"`
				Parent    string             `json:"parent_span_id"`
				Waterfall []struct {
					Name string  `json:"name"`
					End  float64 `json:"end_ms"`
					Dur  float64 `json:"dur_ms"`
				} `json:"waterfall"`
			}
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			var sum float64
			for _, v := range r.Stages {
				sum += v
			}
			if r.ID != "team/a:42" || r.TTFT != 45.157 || fmt.Sprintf("%.3f", sum) != "45.157" {
				t.Errorf("id %q ttft %v stages sum %v", r.ID, r.TTFT, sum)
			}
			if r.Marks["first_token_flushed"] != 45.157 || r.Engine["prefill"] != 30 || r.Parent != "0102030405060708" {
				t.Errorf("marks %v engine %v parent %q", r.Marks, r.Engine, r.Parent)
			}
			if len(r.Waterfall) != 10 || r.Waterfall[4].Name != "prefill" || r.Waterfall[4].Dur != 30 || r.Waterfall[7].End != 45.157 {
				t.Errorf("waterfall %+v", r.Waterfall)
			}
		}},
		{"newest of a reused id", "GET", "/debug/requests/req-0001", 200, func(t *testing.T, body string) {
			if !strings.Contains(body, `"end_reason":"worker_failure"`) {
				t.Errorf("not the newest: %s", body)
			}
		}},
		{"unknown id", "GET", "/debug/requests/nope", 404, func(t *testing.T, body string) {
			if !strings.Contains(body, `"code":"unknown_request_id"`) {
				t.Errorf("body %s", body)
			}
		}},
		{"empty id", "GET", "/debug/requests/", 404, nil},
		{"post", "POST", "/debug/requests", 405, nil},
		{"metrics still served", "GET", "/metrics", 200, nil},
		{"other paths 404", "GET", "/debug/requestsx", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, ct, body := get(admin, tt.method, tt.uri)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if tt.uri != "/metrics" && tt.uri != "/debug/requestsx" && tt.method == "GET" && ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func BenchmarkRingEmit(b *testing.B) {
	g := NewRing(RingOptions{})
	r := typical()
	b.ReportAllocs()
	for b.Loop() {
		g.Emit(r)
	}
}

func BenchmarkRingList(b *testing.B) {
	g := NewRing(RingOptions{})
	r := typical()
	for range 1000 {
		g.Emit(r)
	}
	h := AdminHandler(prometheus.NewRegistry(), g.Routes())
	b.ReportAllocs()
	for b.Loop() {
		get(h, "GET", "/debug/requests")
	}
}

// TestWaterfallJSON checks the waterfall /debug/requests/{id} serves: the
// measured bars, then, for a request routed with a prediction, the
// predicted stages, kind "predicted", from where route ended (marks_ms's
// routed) to predicted_ttft_ms.
func TestWaterfallJSON(t *testing.T) {
	tests := []struct {
		fixture   string
		edit      func(r *record.Record)
		measured  int
		predicted bool
	}{
		{"stop_engine_report", nil, 10, false},
		{"stop_least_ttft", nil, 10, true},
		{"deadline_before_first_token", nil, 4, false},
		{"deadline_before_first_token", predict, 4, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s predicted=%v", tt.fixture, tt.predicted), func(t *testing.T) {
			r := fixtureByName(t, tt.fixture)
			if tt.edit != nil {
				tt.edit(r)
			}
			g := NewRing(RingOptions{})
			g.Emit(r)
			_, _, body := get(AdminHandler(prometheus.NewRegistry(), g.Routes()), "GET", "/debug/requests/"+r.RequestID)
			var page struct {
				TTFT      *float64           `json:"ttft_ms"`
				Predicted float64            `json:"predicted_ttft_ms"`
				Stages    map[string]float64 `json:"predicted_stages_ms"`
				Marks     map[string]float64 `json:"marks_ms"`
				Waterfall []struct {
					Name  string  `json:"name"`
					Kind  string  `json:"kind"`
					Start float64 `json:"start_ms"`
					End   float64 `json:"end_ms"`
					Dur   float64 `json:"dur_ms"`
				} `json:"waterfall"`
			}
			if err := json.Unmarshal([]byte(body), &page); err != nil {
				t.Fatal(err)
			}
			var names []string
			at := page.Marks["routed"]
			for i, b := range page.Waterfall {
				if (b.Kind == "predicted") != (i >= tt.measured) {
					t.Errorf("bar %d %s is %s", i, b.Name, b.Kind)
				}
				if b.Kind != "predicted" {
					continue
				}
				names = append(names, b.Name)
				if b.Start != at || b.Dur != page.Stages[b.Name] {
					t.Errorf("predicted %s from %v for %v, want from %v for %v", b.Name, b.Start, b.Dur, at, page.Stages[b.Name])
				}
				at = b.End
			}
			want := ""
			if tt.predicted {
				want = "queue preparation prefill first_decode unattributed transport"
			}
			if got := strings.Join(names, " "); got != want {
				t.Fatalf("predicted bars %q, want %q", got, want)
			}
			if tt.predicted && page.TTFT != nil && at != page.Predicted {
				t.Errorf("prediction ends at %v, want predicted_ttft_ms %v", at, page.Predicted)
			}
		})
	}
}

// TestPagesCarryTheLogFields checks that /debug/requests/{id} carries
// exactly the fields of the request's log line, with the same values, but
// the log's framing (level, msg), plus its own marks_ms and waterfall; and
// that a row of /debug/requests is a part of it: the pages and the log must
// never disagree about a request.
func TestPagesCarryTheLogFields(t *testing.T) {
	for _, f := range loggedFixtures() {
		t.Run(f.name, func(t *testing.T) {
			r := f.record()
			var out logtest.Lines
			s := NewLogSink(&out, LogOptions{})
			s.Emit(r)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			want := decodeObject(t, out.String())
			delete(want, "level")
			delete(want, "msg")
			g := NewRing(RingOptions{})
			g.Emit(r)
			h := AdminHandler(prometheus.NewRegistry(), g.Routes())
			_, _, body := get(h, "GET", "/debug/requests/"+r.RequestID)
			page := decodeObject(t, body)
			for _, own := range []string{"marks_ms", "waterfall"} {
				if _, ok := page[own]; !ok {
					t.Errorf("%s missing from /debug/requests/{id}", own)
				}
				delete(page, own)
			}
			sameFields(t, "/debug/requests/{id}", page, want)

			_, _, body = get(h, "GET", "/debug/requests")
			var list struct{ Recent []map[string]any }
			if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Recent) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			// A row holds part of the record: at least what the requests
			// page's tables show of every request.
			row := list.Recent[0]
			for _, k := range []string{"time", "request_id", "model", "status", "end_reason", "end_detail", "e2e_ms", "tokens_out"} {
				if _, ok := row[k]; !ok {
					t.Errorf("%s missing from a row of /debug/requests", k)
				}
			}
			for k := range want {
				if _, ok := row[k]; !ok {
					delete(want, k)
				}
			}
			sameFields(t, "a row of /debug/requests", row, want)
		})
	}
}

func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err, s)
	}
	return m
}

// sameFields reports the fields where got, served at where, differs from
// the log line's want.
func sameFields(t *testing.T, where string, got, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: in the log line (%v), not on %s", k, v, where)
		} else if !reflect.DeepEqual(g, v) {
			t.Errorf("%s: %s says %v, the log line %v", k, where, g, v)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: on %s (%v), not in the log line", k, where, g)
		}
	}
}
