package predict

import (
	"bufio"
	"encoding/json"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the series in testdata/ from their generators")

// line is one observation as a series file holds it (JSON lines).
type line struct {
	EndMs          float64 `json:"end_ms"`
	Unsplit        bool    `json:"unsplit,omitempty"`
	Prompt         int     `json:"prompt"`
	Cached         int     `json:"cached,omitempty"`
	CachedReported bool    `json:"cached_reported,omitempty"`
	EngineKnown    bool    `json:"engine_known,omitempty"`
	Waiting        int64   `json:"waiting,omitempty"`
	InFlight       int64   `json:"in_flight"`
	QueueMs        float64 `json:"queue_ms"`
	PreparationMs  float64 `json:"preparation_ms,omitempty"`
	PrefillMs      float64 `json:"prefill_ms,omitempty"`
	FirstDecodeMs  float64 `json:"first_decode_ms,omitempty"`
	UnattributedMs float64 `json:"unattributed_ms"`
	TransportMs    float64 `json:"transport_ms"`
}

func ms(v float64) time.Duration { return time.Duration(math.Round(v * 1e6)) }

func toMs(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func (l line) observation() Observation {
	return Observation{
		End: ms(l.EndMs), FirstToken: true, Unsplit: l.Unsplit,
		PromptTokens: l.Prompt, CachedTokens: l.Cached, CachedReported: l.CachedReported,
		Expected: Expected{Cached: l.Cached}, // a prefix index that knows (replay predicts with it)
		Load:     Load{Waiting: l.Waiting, EngineKnown: l.EngineKnown, InFlight: l.InFlight},
		Parts:    Parts{ms(l.QueueMs), ms(l.PreparationMs), ms(l.PrefillMs), ms(l.FirstDecodeMs), ms(l.UnattributedMs), ms(l.TransportMs)},
	}
}

// engine is a synthetic engine's true costs; each part of each request is
// its truth times log-normal noise of spread noise.
type engine struct {
	prep, fixed, decode, network, transport time.Duration
	perToken                                time.Duration // prefill per uncached token
	queueBase, perAhead                     time.Duration // queue: base + per request ahead
	slots                                   int64         // unscraped: requests in flight beyond these wait
	noise                                   float64
	unsplit, unscraped                      bool
}

// request is one request's record: routed at t with its prompt, cached
// tokens and the requests ahead (waiting) and in flight.
func (e *engine) request(r *rand.Rand, t time.Duration, prompt, cached int, waiting, inFlight int64) line {
	n := func(d time.Duration) float64 {
		return toMs(time.Duration(float64(d) * math.Exp(e.noise*r.NormFloat64())))
	}
	ahead := waiting
	if e.unscraped {
		ahead = max(inFlight-e.slots+1, 0)
	}
	l := line{Prompt: prompt, Cached: cached, CachedReported: true, EngineKnown: !e.unscraped, InFlight: inFlight,
		QueueMs:     n(e.queueBase + time.Duration(ahead)*e.perAhead),
		TransportMs: n(e.transport),
	}
	if !e.unscraped {
		l.Waiting = waiting
	}
	engineParts := [3]float64{n(e.prep), n(e.fixed + time.Duration(prompt-cached)*e.perToken), n(e.decode)}
	if e.unsplit {
		l.Unsplit = true
		l.UnattributedMs = engineParts[0] + engineParts[1] + engineParts[2] + n(e.network)
	} else {
		l.PreparationMs, l.PrefillMs, l.FirstDecodeMs = engineParts[0], engineParts[1], engineParts[2]
		l.UnattributedMs = n(e.network)
	}
	ttft := l.QueueMs + l.PreparationMs + l.PrefillMs + l.FirstDecodeMs + l.UnattributedMs + l.TransportMs
	l.EndMs = toMs(t) + ttft + 50 // the rest of the response
	return l
}

// reference is the steady engine the series start from.
func reference() engine {
	return engine{
		prep: 2 * time.Millisecond, fixed: 15 * time.Millisecond, perToken: 60 * time.Microsecond,
		decode: 25 * time.Millisecond, network: 500 * time.Microsecond, transport: 300 * time.Microsecond,
		queueBase: time.Millisecond, perAhead: 40 * time.Millisecond, slots: 4, noise: 0.15,
	}
}

// generate is a series: rate requests a second for dur, each with a prompt
// of 200 to 2,000 tokens of which a shared prefix (half the requests) is
// cached, routed with load(t); at is called before each request (to change
// the engine, or one request).
func generate(seed uint64, rate float64, dur time.Duration, e engine, load func(r *rand.Rand, t time.Duration) (waiting, inFlight int64), at func(t time.Duration, e *engine) engine) []line {
	r := rand.New(rand.NewPCG(seed, 29))
	var out []line
	step := time.Duration(float64(time.Second) / rate)
	for t := time.Duration(0); t < dur; t += step {
		prompt := 200 + r.IntN(1800)
		cached := 0
		if r.IntN(2) == 0 {
			cached = prompt / 2
		}
		waiting, inFlight := load(r, t)
		this := e
		if at != nil {
			this = at(t, &e)
		}
		out = append(out, this.request(r, t, prompt, cached, waiting, inFlight))
	}
	slices.SortFunc(out, func(a, b line) int { return cmpFloat(a.EndMs, b.EndMs) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// randomLoad is a load of 0 to 4 requests ahead, 2 to 8 in flight.
func randomLoad(r *rand.Rand, _ time.Duration) (int64, int64) {
	return int64(r.IntN(5)), int64(2 + r.IntN(7))
}

// The series, by file name: how each was generated (go test -update
// rewrites them).
var generators = map[string]func() []line{
	// A steady engine at 20 requests a second.
	"steady.jsonl": func() []line { return generate(1, 20, 30*time.Second, reference(), randomLoad, nil) },
	// Its prefill per token doubles at 20 s, its fixed part too.
	"prefill_doubles.jsonl": func() []line {
		return generate(2, 20, 40*time.Second, reference(), randomLoad, func(t time.Duration, e *engine) engine {
			if t >= 20*time.Second && e.perToken == reference().perToken {
				e.perToken *= 2
				e.fixed *= 2
			}
			return *e
		})
	},
	// The requests ahead climb from 0 to 30 over 30 s.
	"queue_builds.jsonl": func() []line {
		return generate(3, 20, 30*time.Second, reference(), func(r *rand.Rand, t time.Duration) (int64, int64) {
			w := int64(t*30/(30*time.Second)) + int64(r.IntN(3)) - 1
			return max(w, 0), max(w, 0) + 4
		}, nil)
	},
	// Unscraped: only this replica's in flight is known, from 2 to 20 over
	// 30 s; past the engine's 4 slots each one more waits.
	"queue_unscraped.jsonl": func() []line {
		e := reference()
		e.unscraped = true
		return generate(4, 20, 30*time.Second, e, func(r *rand.Rand, t time.Duration) (int64, int64) {
			return 0, 2 + int64(t*18/(30*time.Second)) + int64(r.IntN(3))
		}, nil)
	},
	// 5 requests a second; the one at 15 s takes ten times as long in every part.
	"outlier.jsonl": func() []line {
		return generate(5, 5, 30*time.Second, reference(), randomLoad, func(t time.Duration, e *engine) engine {
			if t != 15*time.Second {
				return *e
			}
			o := *e
			for _, d := range []*time.Duration{&o.prep, &o.fixed, &o.perToken, &o.decode, &o.network, &o.transport, &o.queueBase, &o.perAhead} {
				*d *= 10
			}
			return o
		})
	},
	// An engine that reports no split: its time is all unattributed.
	"unsplit.jsonl": func() []line {
		e := reference()
		e.unsplit = true
		return generate(6, 20, 30*time.Second, e, randomLoad, nil)
	},
}

// readSeries reads testdata/name, rewriting it first under -update.
func readSeries(t *testing.T, name string) []Observation {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(f)
		for _, l := range generators[name]() {
			if err := enc.Encode(l); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Observation
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, l.observation())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scored is one prediction made during a replay, against what its request
// then measured.
type scored struct {
	at   time.Duration // routed
	miss Miss
}

// replay runs a series through a Model as the gateway would: each request
// predicted when it is routed (its end less its time to first token less
// the rest of its response), each observed at its end, in the order of
// those times. It returns the predictions made with a model to ask;
// observed (nil: none) is called after each observation.
func replay(m *Model, series []Observation, observed func(o *Observation)) []scored {
	type event struct {
		at      time.Duration
		observe bool
		o       *Observation
	}
	var events []event
	for i := range series {
		o := &series[i]
		events = append(events, event{at: routedAt(o), o: o}, event{at: o.End, observe: true, o: o})
	}
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	var out []scored
	for _, e := range events {
		if e.observe {
			m.Observe(*e.o)
			if observed != nil {
				observed(e.o)
			}
			continue
		}
		cached := 0
		if e.o.CachedReported {
			cached = e.o.CachedTokens // a prefix index that knows
		}
		if p, ok := m.Predict(e.at, e.o.PromptTokens, Expected{Cached: cached}, e.o.Load); ok {
			out = append(out, scored{at: e.at, miss: Compare(p.Parts, e.o.Parts)})
		}
	}
	return out
}

// routedAt is when the request was routed: its end less its time to first
// token and the rest of its response (generate's 50 ms).
func routedAt(o *Observation) time.Duration { return o.End - o.Parts.Sum() - 50*time.Millisecond }

// errorP50 is the median prediction error |predicted/actual − 1| of the
// predictions made in [from, to).
func errorP50(s []scored, from, to time.Duration) (float64, int) {
	var errs []float64
	for _, x := range s {
		if x.at >= from && x.at < to {
			errs = append(errs, math.Abs(x.miss.Ratio-1))
		}
	}
	if len(errs) == 0 {
		return math.NaN(), 0
	}
	slices.Sort(errs)
	return errs[len(errs)/2], len(errs)
}

// TestSeries replays each recorded series and holds the median prediction
// error within windows of its time to the target (20 %) or the
// bound the window states.
func TestSeries(t *testing.T) {
	const s = time.Second
	type window struct {
		from, to time.Duration
		max      float64 // the median error's bound
	}
	for _, tc := range []struct {
		name    string
		windows []window
	}{
		// Past its first seconds, the steady engine is predicted within
		// the target.
		{"steady.jsonl", []window{{2 * s, 30 * s, 0.20}}},
		// Before the change, and from 5 s after it (the prediction has
		// followed the new prefill).
		{"prefill_doubles.jsonl", []window{{2 * s, 20 * s, 0.20}, {25 * s, 40 * s, 0.20}}},
		{"queue_builds.jsonl", []window{{5 * s, 30 * s, 0.20}}},
		// The wait starts past the slots, a knee that a line fits less
		// well.
		{"queue_unscraped.jsonl", []window{{10 * s, 30 * s, 0.25}}},
		{"outlier.jsonl", []window{{4 * s, 30 * s, 0.20}}},
		{"unsplit.jsonl", []window{{2 * s, 30 * s, 0.20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := replay(New(Config{}), readSeries(t, tc.name), nil)
			for _, w := range tc.windows {
				p50, n := errorP50(got, w.from, w.to)
				t.Logf("%v–%v: %d predictions, error p50 %.1f %%", w.from, w.to, n, p50*100)
				if n == 0 || !(p50 <= w.max) {
					t.Errorf("%v–%v: error p50 %.1f %% over %d predictions, want ≤ %.0f %%", w.from, w.to, p50*100, n, w.max*100)
				}
			}
		})
	}
}
