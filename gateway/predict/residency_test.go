package predict

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDistClass: half octaves from 64 tokens, the last class open.
func TestDistClass(t *testing.T) {
	for _, tc := range []struct {
		d    uint64
		want int
	}{
		{0, 0}, {63, 0}, {64, 1}, {95, 1}, {96, 2}, {127, 2}, {128, 3}, {192, 4},
		{6144, 14}, {1 << 28, distClasses - 1}, {1<<64 - 1, distClasses - 1},
	} {
		if got := distClass(tc.d); got != tc.want {
			t.Errorf("distClass(%d) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestEvictedFrom: the boundary between the classes of hits and misses
// that miscounts the least, the farthest on a tie: the first miss's class
// past the hits.
func TestEvictedFrom(t *testing.T) {
	type report struct {
		d    uint64
		hit  bool
		seen float64
	}
	for _, tc := range []struct {
		name    string
		reports []report
		want    int
	}{
		{"no reports: nothing evicted", nil, distClasses},
		{"hits only", []report{{100, true, 5}, {50_000, true, 1}}, distClasses},
		{"misses only", []report{{100, false, 3}}, distClass(100)},
		{"hits near, misses far", []report{{1000, true, 10}, {3000, true, 10}, {8000, false, 10}}, distClass(8000)},
		{"a miss among hits near is outweighed", []report{{0, false, 1}, {0, true, 4}, {2000, true, 10}, {9000, false, 6}}, distClass(9000)},
		{"a hit far beyond misses is outweighed", []report{{2000, true, 10}, {9000, false, 6}, {40_000, true, 1}}, distClass(9000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r residency
			for _, rep := range tc.reports {
				r.add(rep.seen, rep.d, rep.hit)
			}
			if got := r.evictedFrom(); got != tc.want {
				t.Errorf("evictedFrom = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestResidency: an engine whose cache keeps about 4,000 tokens of new
// work: a prefix the index expects cached is predicted cached while the
// tokens sent there since are few, and computed (Evicted) once they are
// past what the engine's reports showed it keeps; before any miss, the
// index is taken at its word at any distance.
func TestResidency(t *testing.T) {
	const perToken, prompt, keeps = 50 * time.Microsecond, 1000, 4000
	m := New(Config{})
	for i := range 40 {
		d := uint64(500 + 300*i) // 500 to 12,200
		cached := 0
		if d < keeps {
			cached = prompt - 40
		}
		if i == 0 || i == 1 {
			d = 0 // came while the prefix was being computed: missed
		}
		m.Observe(Observation{
			End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true, PromptTokens: prompt,
			CachedTokens: cached, CachedReported: true, Expected: Expected{Cached: prompt - 40, Distance: d},
			Parts: Parts{Prefill: time.Duration(prompt-cached) * perToken},
		})
	}
	for _, tc := range []struct {
		d       uint64
		evicted bool
	}{{0, false}, {1000, false}, {3000, false}, {6000, true}, {1 << 40, true}} {
		p, _ := m.Predict(2*time.Second, prompt, Expected{Cached: prompt - 40, Distance: tc.d}, Load{})
		want := 40 * perToken
		if tc.evicted {
			want = prompt * perToken
		}
		if p.Evicted != tc.evicted || !within(p.Parts[Prefill], want, 0.1) {
			t.Errorf("at distance %d: Evicted %v, prefill %v; want %v, %v", tc.d, p.Evicted, p.Parts[Prefill], tc.evicted, want)
		}
	}

	trusting := New(Config{})
	trusting.Observe(Observation{
		FirstToken: true, PromptTokens: prompt, CachedTokens: prompt - 40, CachedReported: true,
		Expected: Expected{Cached: prompt - 40, Distance: 100}, Parts: Parts{Prefill: 40 * perToken},
	})
	if p, _ := trusting.Predict(0, prompt, Expected{Cached: prompt - 40, Distance: 1 << 30}, Load{}); p.Evicted {
		t.Error("before any miss, a far prefix was predicted evicted")
	}
}

// TestHitPrefill: a hit's prefill is predicted from the hits' own line, not
// the misses'. Here misses cost 50 µs a token and hits, whose few tokens
// attend to the long cached context, 200 µs: a line over all would give a
// hit of 40 tokens about 2 ms, where it takes 8.
func TestHitPrefill(t *testing.T) {
	const prompt = 1000
	m := New(Config{})
	for i := range 40 {
		o := Observation{
			End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true, PromptTokens: prompt + 10*i,
			CachedReported: true, Expected: Expected{Cached: prompt - 40},
		}
		if i%4 == 0 { // a miss
			o.Parts[Prefill] = time.Duration(o.PromptTokens) * 50 * time.Microsecond
		} else {
			o.CachedTokens = prompt - 40
			o.Parts[Prefill] = time.Duration(o.PromptTokens-o.CachedTokens) * 200 * time.Microsecond
		}
		m.Observe(o)
	}
	hit, _ := m.Predict(2*time.Second, prompt, Expected{Cached: prompt - 40}, Load{})
	if want := 40 * 200 * time.Microsecond; !within(hit.Parts[Prefill], want, 0.1) {
		t.Errorf("a hit: prefill %v, want %v", hit.Parts[Prefill], want)
	}
	miss, _ := m.Predict(2*time.Second, prompt, Expected{}, Load{})
	if want := prompt * 50 * time.Microsecond; !within(miss.Parts[Prefill], want, 0.1) {
		t.Errorf("a miss: prefill %v, want %v", miss.Parts[Prefill], want)
	}
}

// TestHitPrefillPairs: on an engine whose attention is most of a hit's
// cost (the reference engine's), a hit's prefill grows with the cached
// context its tokens attend to: hits of 30 to 50 tokens past 1,000 and
// 2,000 cached cost 1 µs a (token, context token) pair. The hits' line over
// pairs fits them better than the line over the tokens computed and is
// taken: a hit past 2,000 is predicted twice the cost of one past 1,000
// (the line over tokens gives both the mean), and one of 40 past 1,500
// between.
func TestHitPrefillPairs(t *testing.T) {
	const (
		fixed   = 5 * time.Millisecond
		perPair = time.Microsecond
	)
	cost := func(n, c int) time.Duration { return fixed + time.Duration(n*(2*c+n)/2)*perPair }
	m := New(Config{})
	for i := range 40 {
		n, c := 30+(i*7)%21, 1000*(1+i%2)
		m.Observe(Observation{
			End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true,
			PromptTokens: c + n, EstimatedTokens: c + n, CachedTokens: c, CachedReported: true,
			Expected: Expected{Cached: c}, Parts: Parts{Prefill: cost(n, c)},
		})
	}
	for _, c := range []int{1000, 1500, 2000} {
		p, _ := m.Predict(2*time.Second, c+40, Expected{Cached: c}, Load{})
		if want := cost(40, c); !within(p.Parts[Prefill], want, 0.05) {
			t.Errorf("a hit of 40 tokens past %d cached: prefill %v, want %v", c, p.Parts[Prefill], want)
		}
	}
}

// TestHitPrefillTokens: on an engine whose per-token layers are a hit's
// cost (a large model on an accelerator: attention over the context is a
// small share), hits of 30 to 50 tokens past one prompt of 1,000 cached,
// with 5 % noise, fit both lines alike, and the pairs' line must not be
// taken on that noise: it would put a hit past 4,000 cached at about
// three times its cost. Fifty noise draws, each held to 20 %.
func TestHitPrefillTokens(t *testing.T) {
	const (
		fixed    = 5 * time.Millisecond
		perToken = 400 * time.Microsecond
	)
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		m := New(Config{})
		for i := range 40 {
			n := 30 + rng.IntN(21)
			cost := float64(fixed+time.Duration(n)*perToken) * (0.95 + 0.1*rng.Float64())
			m.Observe(Observation{
				End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true,
				PromptTokens: 1000 + n, EstimatedTokens: 1000 + n, CachedTokens: 1000, CachedReported: true,
				Expected: Expected{Cached: 1000}, Parts: Parts{Prefill: time.Duration(cost)},
			})
		}
		p, _ := m.Predict(2*time.Second, 4040, Expected{Cached: 4000}, Load{})
		if want := fixed + 40*perToken; !within(p.Parts[Prefill], want, 0.2) {
			t.Errorf("noise draw %d: a hit of 40 tokens past 4,000 cached: prefill %v, want %v", seed, p.Parts[Prefill], want)
		}
	}
}

// TestBacklogQueue: where the queue follows the work ahead rather than the
// number of requests ahead (a miss ahead holds a request as long as ten
// hits), the backlog's line is taken, and predicts it.
func TestBacklogQueue(t *testing.T) {
	m := New(Config{})
	for i := range 60 {
		ahead := int64(i % 4)                                       // requests ahead
		backlog := time.Duration((i*7)%10) * 100 * time.Millisecond // their work: not their number
		m.Observe(Observation{
			End: time.Duration(i) * 50 * time.Millisecond, FirstToken: true, PromptTokens: 100,
			Load:  Load{InFlight: ahead, Waiting: ahead, EngineKnown: true, Backlog: backlog},
			Parts: Parts{Queue: backlog, Prefill: 10 * time.Millisecond},
		})
	}
	for _, backlog := range []time.Duration{0, 300 * time.Millisecond, 900 * time.Millisecond} {
		p, _ := m.Predict(3*time.Second, 100, Expected{}, Load{InFlight: 1, Waiting: 1, EngineKnown: true, Backlog: backlog})
		if d := p.Parts[Queue] - backlog; d < -5*time.Millisecond || d > 5*time.Millisecond {
			t.Errorf("backlog %v: queue %v, want it", backlog, p.Parts[Queue])
		}
	}
}
