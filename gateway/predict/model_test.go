package predict

import (
	"math"
	"sync"
	"testing"
	"time"
)

// within reports whether got is within share of want.
func within(got, want time.Duration, share float64) bool {
	return math.Abs(float64(got-want)) <= share*float64(want)
}

// TestFollowsPrefill: in prefill_doubles.jsonl the per-token prefill and
// its fixed part double at 20 s; the predicted prefill of a 1,000-token
// prompt is within 20 % of the engine's true cost before, and again from
// 3 s after the change.
func TestFollowsPrefill(t *testing.T) {
	m := New(Config{})
	var checked int
	replay(m, readSeries(t, "prefill_doubles.jsonl"), func(o *Observation) {
		var truth time.Duration
		switch {
		case o.End > 5*time.Second && o.End < 20*time.Second:
			truth = 15*time.Millisecond + 1000*60*time.Microsecond
		case o.End > 23*time.Second:
			truth = 2 * (15*time.Millisecond + 1000*60*time.Microsecond)
		default:
			return
		}
		p, _ := m.Predict(o.End, 1000, Expected{}, Load{})
		if !within(p.Parts[Prefill], truth, 0.2) {
			t.Fatalf("at %v: prefill of 1,000 tokens predicted %v, truth %v", o.End, p.Parts[Prefill], truth)
		}
		checked++
	})
	if checked < 500 {
		t.Fatalf("%d predictions checked", checked)
	}
}

// TestOutlier: outlier.jsonl's request at 15 s took ten times as long in
// every part; the prediction of a typical request moves by less than 10 %
// when it is observed (taken as all of it, it would move it by half).
func TestOutlier(t *testing.T) {
	m := New(Config{})
	series := readSeries(t, "outlier.jsonl")
	var slowest *Observation
	for i := range series {
		if slowest == nil || series[i].Parts.Sum() > slowest.Parts.Sum() {
			slowest = &series[i]
		}
	}
	load := Load{Waiting: 2, EngineKnown: true, InFlight: 5}
	var before time.Duration
	replay(m, series, func(o *Observation) {
		p, _ := m.Predict(o.End, 1000, Expected{Cached: 250}, load)
		switch {
		case o == slowest:
			t.Logf("the outlier moved the prediction from %v to %v", before, p.Total)
			if !within(p.Total, before, 0.1) {
				t.Errorf("after the outlier (%v): predicted %v, before it %v", o.Parts.Sum(), p.Total, before)
			}
		default:
			before = p.Total
		}
	})
}

// TestQueueLoad: once queue_builds.jsonl has climbed to 30 requests ahead,
// the predicted queue grows with the requests ahead, within 20 % of the
// engine's 1 ms + 40 ms each; with the engine's load unknown, the replica's
// in flight stands in for it (queue_unscraped.jsonl: 40 ms for each past
// 4 slots, a knee a line follows within 25 % once well past it).
func TestQueueLoad(t *testing.T) {
	m := New(Config{})
	replay(m, readSeries(t, "queue_builds.jsonl"), nil)
	for _, ahead := range []int64{5, 10, 20, 30} {
		p, _ := m.Predict(30*time.Second, 1000, Expected{}, Load{Waiting: ahead, EngineKnown: true, InFlight: ahead + 4})
		if truth := time.Millisecond + time.Duration(ahead)*40*time.Millisecond; !within(p.Parts[Queue], truth, 0.2) {
			t.Errorf("%d ahead: queue predicted %v, truth %v", ahead, p.Parts[Queue], truth)
		}
	}
	m = New(Config{})
	replay(m, readSeries(t, "queue_unscraped.jsonl"), nil)
	for _, inFlight := range []int64{10, 15, 20} {
		p, _ := m.Predict(30*time.Second, 1000, Expected{}, Load{InFlight: inFlight})
		if truth := time.Millisecond + time.Duration(inFlight-3)*40*time.Millisecond; !within(p.Parts[Queue], truth, 0.25) {
			t.Errorf("%d in flight: queue predicted %v, truth %v", inFlight, p.Parts[Queue], truth)
		}
	}
}

// TestUnsplit: an engine that reports no split is predicted as one part,
// Unattributed, growing with the prompt.
func TestUnsplit(t *testing.T) {
	m := New(Config{})
	replay(m, readSeries(t, "unsplit.jsonl"), nil)
	small, _ := m.Predict(30*time.Second, 200, Expected{}, Load{})
	p, _ := m.Predict(30*time.Second, 2000, Expected{}, Load{})
	if !p.Unsplit || p.Parts[Preparation]+p.Parts[Prefill]+p.Parts[FirstDecode] != 0 || p.Parts[Unattributed] <= small.Parts[Unattributed] {
		t.Fatalf("unsplit prediction %+v (200 tokens: %+v)", p, small)
	}
}

// TestColdStart: a model predicts nothing until it has observed a request
// with a first token; after one, it predicts that request's parts for the
// same request.
func TestColdStart(t *testing.T) {
	first := Observation{
		End: 10 * time.Second, FirstToken: true, PromptTokens: 500, Load: Load{InFlight: 1},
		Parts: Parts{time.Millisecond, 2 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond, time.Millisecond, time.Millisecond},
	}
	noToken := first
	noToken.FirstToken = false
	for _, tc := range []struct {
		name string
		seen []Observation
		ok   bool
	}{
		{"none", nil, false},
		{"no first token", []Observation{noToken}, false},
		{"one", []Observation{first}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{})
			for _, o := range tc.seen {
				m.Observe(o)
			}
			p, ok := m.Predict(11*time.Second, 500, Expected{}, Load{InFlight: 1})
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && (p.Parts != first.Parts || p.Total != first.Parts.Sum() || p.Age != time.Second) {
				t.Fatalf("prediction %+v, want the observed %v, age 1s", p, first.Parts)
			}
		})
	}
}

// TestMissAfterHits: a model that has taken only hits (1,500-token
// prompts, all but 40 tokens cached) predicts another hit, and nothing
// for a prompt it would compute: the hits' line says nothing of a whole
// prompt's prefill. Once it has taken a miss, it predicts misses from it.
func TestMissAfterHits(t *testing.T) {
	const perToken = 600 * time.Microsecond
	m := New(Config{})
	observe := func(end time.Duration, cached int) {
		m.Observe(Observation{
			End: end, FirstToken: true, PromptTokens: 1500, CachedTokens: cached, CachedReported: true,
			Expected: Expected{Cached: 1460},
			Parts:    Parts{Prefill: 40*time.Millisecond + time.Duration(1500-cached)*perToken/10},
		})
	}
	for i := range 4 {
		observe(time.Duration(i)*time.Second, 1460+i)
	}
	if _, ok := m.Predict(4*time.Second, 1500, Expected{Cached: 1460}, Load{}); !ok {
		t.Fatal("no prediction of a hit after four hits")
	}
	if p, ok := m.Predict(4*time.Second, 1500, Expected{}, Load{}); ok {
		t.Fatalf("a miss predicted from the hits' line: %+v", p)
	}
	m.Observe(Observation{End: 4 * time.Second, FirstToken: true, PromptTokens: 1500, CachedReported: true,
		Parts: Parts{Prefill: 1500 * perToken}})
	if p, ok := m.Predict(5*time.Second, 1500, Expected{}, Load{}); !ok || !within(p.Parts[Prefill], 1500*perToken, 0.01) {
		t.Fatalf("after a miss: %+v (ok %v), want a prefill of %v", p, ok, 1500*perToken)
	}
}

// TestHitAfterFallingMisses: a model that has seen only two misses, the
// longer prompt the faster, predicts a hit (its prefix expected cached) at
// a few tokens' cost, in proportion to the misses', not at their mean: a
// whole prompt's prefill predicted for every hit had an SLO route refuse
// every request after its first misses, and so learn nothing.
func TestHitAfterFallingMisses(t *testing.T) {
	m := New(Config{})
	for i, miss := range []struct {
		tokens  int
		prefill time.Duration
	}{{1200, 1300 * time.Millisecond}, {1800, 1200 * time.Millisecond}} {
		m.Observe(Observation{End: time.Duration(i) * time.Second, FirstToken: true, PromptTokens: miss.tokens,
			CachedTokens: 16, CachedReported: true, Parts: Parts{Prefill: miss.prefill}})
	}
	p, ok := m.Predict(2*time.Second, 1500, Expected{Cached: 1456}, Load{})
	if !ok || p.Parts[Prefill] > 100*time.Millisecond {
		t.Fatalf("a hit of 44 tokens to compute predicted %+v (ok %v); want the misses' cost of 44 tokens, about 35 ms", p, ok)
	}
}

// TestCachedTokens: the expected cached tokens shorten the predicted
// prefill when the engine reports what it cached, and count for nothing
// when it does not (its prefill was learned against whole prompts).
func TestCachedTokens(t *testing.T) {
	for _, reported := range []bool{true, false} {
		m := New(Config{})
		for i := range 20 {
			prompt := 500 + 100*i
			m.Observe(Observation{
				End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true, PromptTokens: prompt, CachedReported: reported,
				Parts: Parts{Prefill: time.Duration(prompt) * 50 * time.Microsecond},
			})
		}
		whole, _ := m.Predict(2*time.Second, 1000, Expected{}, Load{})
		half, _ := m.Predict(2*time.Second, 1000, Expected{Cached: 500}, Load{})
		if want := whole.Parts[Prefill] / 2; reported && !within(half.Parts[Prefill], want, 0.01) {
			t.Errorf("reported: 500 of 1,000 cached: prefill %v, want %v", half.Parts[Prefill], want)
		}
		if !reported && half.Parts[Prefill] != whole.Parts[Prefill] {
			t.Errorf("not reported: 500 of 1,000 cached: prefill %v, want %v", half.Parts[Prefill], whole.Parts[Prefill])
		}
	}
}

// TestForgetting: an observation one half-life older than the newest
// counts half as much, whether it came before or after it; a long quiet
// spell still keeps half of what was learned (minKeep).
func TestForgetting(t *testing.T) {
	obs := func(end, queue time.Duration) Observation {
		return Observation{End: end, FirstToken: true, Parts: Parts{Queue: queue}}
	}
	for _, tc := range []struct {
		name string
		seen []Observation
		want time.Duration // the queue predicted: a weighted mean
	}{
		{"in order", []Observation{obs(0, 10*time.Millisecond), obs(2*time.Second, 40*time.Millisecond)}, 30 * time.Millisecond},
		{"out of order", []Observation{obs(2*time.Second, 40*time.Millisecond), obs(0, 10*time.Millisecond)}, 30 * time.Millisecond},
		{"quiet spell", []Observation{obs(0, 10*time.Millisecond), obs(time.Minute, 40*time.Millisecond)}, 30 * time.Millisecond},
		{"same time", []Observation{obs(0, 10*time.Millisecond), obs(0, 40*time.Millisecond)}, 25 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{HalfLife: 2 * time.Second})
			for _, o := range tc.seen {
				m.Observe(o)
			}
			if p, _ := m.Predict(time.Minute, 0, Expected{}, Load{}); !within(p.Parts[Queue], tc.want, 0.001) {
				t.Fatalf("queue %v, want %v", p.Parts[Queue], tc.want)
			}
		})
	}
}

// TestConcurrent: Predict reads what Observe publishes without a lock
// (run it with -race); every model state here predicts the one prefill
// observed. Its goroutines are waited for before it returns.
func TestConcurrent(t *testing.T) {
	m := New(Config{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p, ok := m.Predict(0, 1000, Expected{}, Load{}); ok && !within(p.Parts[Prefill], 10*time.Millisecond, 1e-6) {
					t.Errorf("prediction %v, want 10ms", p.Parts[Prefill])
					return
				}
			}
		})
	}
	for i := range 2000 {
		m.Observe(Observation{End: time.Duration(i) * time.Millisecond, FirstToken: true, PromptTokens: 1000, Parts: Parts{Prefill: 10 * time.Millisecond}})
	}
	close(stop)
	wg.Wait()
}

// TestKinds: which fits a prediction comes from follows what most recent
// observations had: split or unsplit, the engine's load scraped or not,
// and the load the prediction is asked with.
func TestKinds(t *testing.T) {
	const ms = time.Millisecond
	split := Observation{FirstToken: true, PromptTokens: 100, Load: Load{Waiting: 2, EngineKnown: true, InFlight: 6},
		Parts: Parts{Queue: 20 * ms, Prefill: 10 * ms, Unattributed: ms}}
	unsplit := Observation{FirstToken: true, PromptTokens: 100, Unsplit: true, Load: Load{InFlight: 3},
		Parts: Parts{Queue: 9 * ms, Unattributed: 30 * ms}}
	for _, tc := range []struct {
		name        string
		seen        []Observation // one a second
		load        Load
		unsplit     bool
		queue, rest time.Duration // the queue predicted, and the rest
	}{
		{"split, scraped", []Observation{split}, Load{Waiting: 4, EngineKnown: true, InFlight: 1}, false, 40 * ms, 11 * ms},
		// Asked without a scrape: the in-flight line (20 ms at 6: 10 at 3).
		{"split, asked unscraped", []Observation{split}, Load{InFlight: 3}, false, 10 * ms, 11 * ms},
		{"unsplit", []Observation{unsplit}, Load{Waiting: 4, EngineKnown: true, InFlight: 6}, true, 18 * ms, 30 * ms},
		// Most recent unsplit and unscraped: their fits, though the older
		// split and scraped ones are still known (the in-flight line
		// through 20 ms at 6 and 9 ms at 3).
		{"split, then unsplit", []Observation{split, unsplit, unsplit}, Load{Waiting: 4, EngineKnown: true, InFlight: 3}, true, 9 * ms, 30 * ms},
		{"unsplit, then split", []Observation{unsplit, split, split}, Load{Waiting: 4, EngineKnown: true, InFlight: 3}, false, 40 * ms, 11 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{})
			for i, o := range tc.seen {
				o.End = time.Duration(i) * time.Second
				m.Observe(o)
			}
			p, _ := m.Predict(time.Minute, 100, Expected{}, tc.load)
			if p.Unsplit != tc.unsplit || !within(p.Parts[Queue], tc.queue, 0.01) || !within(p.Total-p.Parts[Queue], tc.rest, 0.01) {
				t.Fatalf("prediction %+v, want unsplit %v, queue %v, rest %v", p, tc.unsplit, tc.queue, tc.rest)
			}
		})
	}
}

// TestCachedShares: the model learns how far the prefix index's
// expectations hold on its engine. An engine that keeps prompts the index
// has named elsewhere (it expected none) is predicted to have that share
// cached; one that evicts what the index expects cached is predicted to
// compute it; until the engine reports on an expectation, the index is
// taken at its word.
func TestCachedShares(t *testing.T) {
	const perToken = 50 * time.Microsecond
	teach := func(m *Model, expected, cached func(prompt int) int) {
		for i := range 20 {
			prompt := 500 + 100*i
			c := cached(prompt)
			m.Observe(Observation{
				End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true, PromptTokens: prompt,
				CachedTokens: c, CachedReported: true, Expected: Expected{Cached: expected(prompt)},
				Parts: Parts{Prefill: time.Duration(prompt-c) * perToken},
			})
		}
	}
	prefill := func(m *Model, expected int) time.Duration {
		p, _ := m.Predict(2*time.Second, 1000, Expected{Cached: expected}, Load{})
		return p.Parts[Prefill]
	}
	none := func(int) int { return 0 }
	keeps := New(Config{}) // the index expects nothing; the engine has 90 % cached
	teach(keeps, none, func(p int) int { return p * 9 / 10 })
	if got, want := prefill(keeps, 0), 100*perToken; !within(got, want, 0.05) {
		t.Errorf("an engine that keeps prompts: prefill %v, want %v (a tenth computed)", got, want)
	}
	evicts := New(Config{}) // the index expects all cached; the engine has none
	teach(evicts, func(p int) int { return p }, none)
	if got, want := prefill(evicts, 1000), 1000*perToken; !within(got, want, 0.05) {
		t.Errorf("an engine that evicts: prefill %v, want %v (all computed)", got, want)
	}
	if got := prefill(keeps, 600); !within(got, 400*perToken, 0.05) {
		t.Errorf("no report on an expectation yet: prefill %v, want the 400 tokens the index expects uncached", got)
	}
}

// TestRemainderLine: the engine's count of a hit's remainder (the part past
// what the index expected cached) is a fixed part, the chat framing and
// the last partial block, and the question, counted as the engine counts
// the estimate's tokens anywhere: here 32 tokens and the question's
// estimate times the engine's ratio. A remainder the hits have not shown
// (60 estimated) is predicted as that; a ratio of the two counts, the
// mean of theirs, puts the fixed part on the question (about 160 tokens
// for 107). An engine counting fewer tokens than the estimate (0.8) is
// not taken to have held less of the prefix than it did: counted in the
// estimate's terms, its full hits read as 80 % of the expectation, and
// the fifth left predicted computed came to about 170 tokens more.
func TestRemainderLine(t *testing.T) {
	const (
		perToken = 500 * time.Microsecond
		fixed    = 10 * time.Millisecond
	)
	for _, tc := range []struct {
		name  string
		ratio float64 // the engine's tokens per estimated token
	}{
		{"an engine counting a quarter more than the estimate", 1.25},
		{"an engine counting a fifth fewer", 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := func(n int) int { return int(math.Round(tc.ratio * float64(n))) }
			remainder := func(rest int) int { return 32 + engine(rest) }
			m := New(Config{})
			for i := range 30 {
				rest := 10 * (1 + i%5)
				m.Observe(Observation{
					End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true,
					PromptTokens: engine(1000) + remainder(rest), EstimatedTokens: 1000 + rest, CachedTokens: engine(1000), CachedReported: true,
					Expected: Expected{Cached: 1000}, Parts: Parts{Prefill: fixed + time.Duration(remainder(rest))*perToken},
				})
			}
			p, _ := m.Predict(3*time.Second, 1060, Expected{Cached: 1000}, Load{})
			if want := fixed + time.Duration(remainder(60))*perToken; !within(p.Parts[Prefill], want, 0.05) {
				t.Errorf("a hit of 60 tokens past the expected prefix (the estimate's): prefill %v, want %v (%d of the engine's)", p.Parts[Prefill], want, remainder(60))
			}
		})
	}
}

// TestIdleQueue: a request routed with nothing ahead (nothing of this
// replica's in flight, none waiting at the engine) waits as the requests
// routed so waited, 0.2 ms here, whatever line the busy ones drew: the
// backlog's line here starts at 16 ms (40 ms for the busy requests, 0.2 for
// the idle ones, at no backlog). A request with something ahead is
// predicted on the line.
func TestIdleQueue(t *testing.T) {
	m := New(Config{})
	for i := range 60 {
		o := Observation{End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true, PromptTokens: 100,
			Parts: Parts{Prefill: 10 * time.Millisecond}}
		if i%3 == 0 { // idle
			o.Load = Load{EngineKnown: true}
			o.Parts[Queue] = 200 * time.Microsecond
		} else {
			backlog := time.Duration(i%5) * 100 * time.Millisecond
			o.Load = Load{InFlight: 2, Waiting: 1, EngineKnown: true, Backlog: backlog}
			o.Parts[Queue] = 40*time.Millisecond + backlog/2
		}
		m.Observe(o)
	}
	predict := func(load Load) time.Duration {
		p, _ := m.Predict(3*time.Second, 100, Expected{}, load)
		return p.Parts[Queue]
	}
	for _, load := range []Load{{EngineKnown: true}, {}} {
		if got, want := predict(load), 200*time.Microsecond; !within(got, want, 0.1) {
			t.Errorf("idle, %+v: queue %v, want %v", load, got, want)
		}
	}
	for _, load := range []Load{{Waiting: 1, EngineKnown: true}, {InFlight: 1}, {InFlight: 2, Waiting: 1, EngineKnown: true, Backlog: 200 * time.Millisecond}} {
		if got := predict(load); got < 10*time.Millisecond {
			t.Errorf("something ahead, %+v: queue %v, want the line's (over 10 ms)", load, got)
		}
	}
}

// TestEstimatedTokens: the fits learn in the engine's tokens, a request is
// predicted from the gateway's estimate: an engine whose tokenizer counts
// a quarter more than the estimate (the reference engine's counts about
// that of the estimate's four bytes a token) is predicted from the
// estimate scaled by what its reports showed, the expected cached tokens
// too; until it reports a count, the estimate is taken as its count.
func TestEstimatedTokens(t *testing.T) {
	const perToken = 50 * time.Microsecond
	m := New(Config{})
	for i := range 20 {
		est := 800 + 50*i
		engine := est * 5 / 4
		m.Observe(Observation{
			End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true,
			PromptTokens: engine, EstimatedTokens: est, CachedReported: true,
			Parts: Parts{Prefill: time.Duration(engine) * perToken},
		})
	}
	for _, tc := range []struct {
		est, cached int
		want        time.Duration
	}{
		{1000, 0, 1250 * perToken},
		{1000, 800, 250 * perToken},
	} {
		p, _ := m.Predict(2*time.Second, tc.est, Expected{Cached: tc.cached}, Load{})
		if !within(p.Parts[Prefill], tc.want, 0.02) {
			t.Errorf("an estimate of %d tokens, %d expected cached: prefill %v, want %v", tc.est, tc.cached, p.Parts[Prefill], tc.want)
		}
	}
	if r := m.TokenRatio(); math.Abs(r-1.25) > 0.01 {
		t.Errorf("TokenRatio %v, want 1.25", r)
	}
	unreported := New(Config{})
	unreported.Observe(Observation{FirstToken: true, PromptTokens: 1000, Parts: Parts{Prefill: 1000 * perToken}})
	if p, _ := unreported.Predict(0, 1000, Expected{}, Load{}); !within(p.Parts[Prefill], 1000*perToken, 0.02) {
		t.Errorf("no count reported: prefill %v, want the estimate's", p.Parts[Prefill])
	}
	if r, r0 := unreported.TokenRatio(), New(Config{}).TokenRatio(); r != 1 || r0 != 1 {
		t.Errorf("TokenRatio %v with no count reported, %v with no observation; want 1", r, r0)
	}
}

// TestRemainderTokens: the part of a prompt past what the index expected
// cached is counted by the estimate otherwise than a whole prompt (the
// question, the last partial block, the framing): an engine whose hits
// compute twice the remainder the estimate gives, while its whole prompts
// count a quarter more, is predicted by each ratio where it applies.
func TestRemainderTokens(t *testing.T) {
	const (
		perToken = 500 * time.Microsecond
		fixed    = 20 * time.Millisecond
	)
	m := New(Config{})
	observe := func(i, est, expected, engine, cached int) {
		m.Observe(Observation{
			End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true,
			PromptTokens: engine, EstimatedTokens: est, CachedTokens: cached, CachedReported: true, Expected: Expected{Cached: expected},
			Parts: Parts{Prefill: fixed + time.Duration(engine-cached)*perToken},
		})
	}
	for i := range 30 {
		est := 1000 + 40*(i%5)
		if i%6 == 0 { // a miss: the whole prompt, a quarter more in the engine's count
			observe(i, est, 0, est*5/4, 0)
			continue
		}
		// a hit: the index expected est-20 cached; the engine computed 40
		observe(i, est, est-20, est*5/4, est*5/4-40)
	}
	for _, tc := range []struct {
		name          string
		est, expected int
		want          time.Duration
	}{
		{"a hit", 1100, 1080, fixed + 40*perToken},
		{"a miss", 1100, 0, fixed + 1375*perToken},
	} {
		p, _ := m.Predict(3*time.Second, tc.est, Expected{Cached: tc.expected}, Load{})
		if !within(p.Parts[Prefill], tc.want, 0.05) {
			t.Errorf("%s: prefill %v, want %v", tc.name, p.Parts[Prefill], tc.want)
		}
	}
}

// TestBusyHits: a hit routed with something ahead (a busy engine's step
// carries other requests' work beside its few tokens) is learned and
// predicted apart from one routed to an idle upstream; until a kind has
// been seen, the other kind's line predicts it.
func TestBusyHits(t *testing.T) {
	const (
		idleCost = 50 * time.Millisecond
		busyCost = 100 * time.Millisecond
	)
	busy := Load{InFlight: 2, Waiting: 1, EngineKnown: true}
	hit := func(i int, load Load, cost time.Duration) Observation {
		return Observation{End: time.Duration(i) * 100 * time.Millisecond, FirstToken: true,
			PromptTokens: 1540, CachedTokens: 1500, CachedReported: true, Expected: Expected{Cached: 1500},
			Load: load, Parts: Parts{Prefill: cost}}
	}
	predictHit := func(m *Model, load Load) time.Duration {
		p, ok := m.Predict(3*time.Second, 1540, Expected{Cached: 1500}, load)
		if !ok {
			t.Fatalf("%+v: no prediction", load)
		}
		return p.Parts[Prefill]
	}
	both, busyOnly, idleOnly := New(Config{}), New(Config{}), New(Config{})
	for i := range 30 {
		if i%2 == 0 {
			both.Observe(hit(i, Load{EngineKnown: true}, idleCost))
			idleOnly.Observe(hit(i, Load{EngineKnown: true}, idleCost))
		} else {
			both.Observe(hit(i, busy, busyCost))
			busyOnly.Observe(hit(i, busy, busyCost))
		}
	}
	for _, tc := range []struct {
		name string
		m    *Model
		load Load
		want time.Duration
	}{
		{"idle", both, Load{EngineKnown: true}, idleCost},
		{"busy", both, busy, busyCost},
		{"idle, only busy hits seen", busyOnly, Load{}, busyCost},
		{"busy, only idle hits seen", idleOnly, busy, idleCost},
	} {
		if got := predictHit(tc.m, tc.load); !within(got, tc.want, 0.05) {
			t.Errorf("%s: prefill %v, want %v", tc.name, got, tc.want)
		}
	}
}
