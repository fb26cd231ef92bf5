package gateway

import (
	"cmp"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// TestHomes: an upstream's homes keep each prompt's latest send, the oldest
// giving way when full, and hold the tokens of the others sent less than a
// cache's size ago.
func TestHomes(t *testing.T) {
	var h homes
	h.note(1, 1000, 0)
	h.note(2, 500, 100)
	h.note(1, 1200, 300) // sent again: its entry updated
	if h.n != 2 {
		t.Fatalf("%d entries for two prompts", h.n)
	}
	for _, tc := range []struct {
		name                 string
		key, count, capacity uint64
		want                 int
	}{
		{"both, for another prompt", 9, 400, 1000, 1700},
		{"the other, for one of them", 1, 400, 1000, 500},
		{"one sent a cache's size ago is gone", 9, 1100, 1000, 1200},
		{"both gone", 9, 5000, 1000, 0},
	} {
		if got := h.held(tc.key, tc.count, tc.capacity); got != tc.want {
			t.Errorf("%s: held %d, want %d", tc.name, got, tc.want)
		}
	}
	// Noted after the count was read (a Commit between): held.
	h.note(3, 700, 450)
	if got := h.held(9, 400, 1000); got != 2400 {
		t.Errorf("a prompt sent since the count was read: held %d, want 2,400", got)
	}
	for i := range uint64(maxHomes) {
		h.note(100+i, 10, 1000+i)
	}
	if h.n != maxHomes || h.held(0, 1000+maxHomes, 1<<40) != maxHomes*10 {
		t.Fatalf("full: %d entries holding %d tokens; want the %d newest, %d tokens", h.n, h.held(0, 1000+maxHomes, 1<<40), maxHomes, maxHomes*10)
	}
}

// roomPool is alikePool with every engine reporting a cache of size tokens
// (0: none reported), and ups[2] predicted a little slower than the others
// (its prefill 120 µs a token), so that ups[0] and ups[1] are the soonest.
func roomPool(t *testing.T, size int64, teach bool) (*Gateway, *Snapshot, []*Upstream) {
	t.Helper()
	g, s, r, clk := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	if teach {
		alike.teachBut(ups, clk.Now(), 2, 120*time.Microsecond)
	}
	for _, u := range ups {
		u.SetEngineLoad(EngineLoad{KVCacheUsage: -1, CacheTokens: size}, 0)
	}
	return g, s, ups
}

// fill has u hold two prompts of 1,500 tokens, sent just now.
func fill(u *Upstream) {
	u.homes.note(1, 1500, u.computed.Load())
	u.homes.note(2, 1500, u.computed.Load())
}

// unservedPrompt is a system prompt of about 1,500 tokens that no upstream has
// served, and rendezvous hashing's order for it over ups (first: where it
// would be placed with no room considered).
func unservedPrompt(t *testing.T, s *Snapshot, p *fastjson.Parser, i int, ups []*Upstream) (string, []*Upstream) {
	t.Helper()
	system := systemPrompt(i, 1500)
	req := chatRequest(t, s, p, system, "?")
	key := req.prompt.chain[req.prompt.lead-1]
	req.Release()
	order := append([]*Upstream(nil), ups...)
	for i := range order { // by weight, highest first
		for j := i + 1; j < len(order); j++ {
			if prefix.Weight(key, order[j].hash) > prefix.Weight(key, order[i].hash) {
				order[i], order[j] = order[j], order[i]
			}
		}
	}
	return system, order
}

// TestLeastTTFTRoomPlace: a new prompt is placed where rendezvous hashing
// prefers among the caches with room for it (4,000 tokens: room for two
// such prompts, not three), with or without a model; where no engine
// reports its size, or none has room, where the hashing prefers.
func TestLeastTTFTRoomPlace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int64
		teach  bool
		full   []int // of the hashing's order, the upstreams held full
		wantAt int   // the hashing's order of the choice
	}{
		{name: "room at its home", size: 4000, teach: true, wantAt: 0},
		{name: "its home full", size: 4000, teach: true, full: []int{0}, wantAt: 1},
		{name: "its home and the next full", size: 4000, teach: true, full: []int{0, 1}, wantAt: 2},
		{name: "every cache full", size: 4000, teach: true, full: []int{0, 1, 2}, wantAt: 0},
		{name: "no size reported", teach: true, full: []int{0}, wantAt: 0},
		{name: "no model: its home full", size: 4000, full: []int{0}, wantAt: 1},
		{name: "no model, no size reported", full: []int{0}, wantAt: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s, ups := roomPool(t, tc.size, tc.teach)
			var p fastjson.Parser
			system, order := unservedPrompt(t, s, &p, 7, ups)
			for _, i := range tc.full {
				fill(order[i])
			}
			req := chatRequest(t, s, &p, system, "First?")
			c := choose(t, s, &req)
			req.Release()
			// (Placed on the soonest, the choice is not affinity's: place
			// marks it only when it moves the request.)
			if c.Upstream != order[tc.wantAt] || !tc.teach && !c.Affinity || c.Predicted != tc.teach {
				t.Fatalf("%s (affinity %v, predicted %v); want %s, the hashing's %d", c.Upstream.Name, c.Affinity, c.Predicted, order[tc.wantAt].Name, tc.wantAt)
			}
			// It holds the prompt now: the next new prompt finds it fuller.
			if got := c.Upstream.homes.held(0, c.Upstream.computed.Load(), 1<<40); got < 1500 {
				t.Fatalf("%s holds %d tokens after the prompt was placed there", c.Upstream.Name, got)
			}
		})
	}
}

// TestLeastTTFTRoomLeave: a request whose home is predicted past twice the
// soonest goes to the soonest if its cache has room for the prompt, else
// to the soonest with room within twice the soonest, else it stays home
// while home is within four times the soonest, else to the soonest.
func TestLeastTTFTRoomLeave(t *testing.T) {
	for _, tc := range []struct {
		name  string
		full  []int
		ahead int // requests in flight at the home, ups[1]
		want  int
	}{
		{name: "room at the soonest", ahead: 5, want: 0},
		{name: "the soonest full", full: []int{0}, ahead: 5, want: 2},
		{name: "every other full: home within four times the soonest", full: []int{0, 2}, ahead: 5, want: 1},
		{name: "every other full: home past four times the soonest", full: []int{0, 2}, ahead: 12, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, s, ups := roomPool(t, 4000, true)
			var p fastjson.Parser
			system := systemPrompt(3, 1500)
			served(t, g, s, &p, system, ups[1])
			for range tc.ahead { // ups[1], its home, past twice the soonest
				if _, rej := ups[1].Acquire(nil); rej != nil {
					t.Fatal(rej)
				}
			}
			for _, i := range tc.full {
				fill(ups[i])
			}
			req := chatRequest(t, s, &p, system, "Second?")
			c := choose(t, s, &req)
			req.Release()
			if c.Upstream != ups[tc.want] || c.Affinity != (tc.want == 1) || !c.Predicted {
				t.Fatalf("%s (affinity %v, predicted %v, %v); want %s", c.Upstream.Name, c.Affinity, c.Predicted, c.Prediction.Total, ups[tc.want].Name)
			}
		})
	}
}

// TestLeastTTFTRoomPlaceFar: when no cache within twice the soonest has
// room for a new prompt, it is placed on the soonest that has, past that
// bound (an engine of a slower prefill with room), within four times the
// soonest and what is left of its SLO.
func TestLeastTTFTRoomPlaceFar(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slo      time.Duration
		perToken time.Duration // the slow engine's prefill a token (0: 400 µs, 3.5 times the others')
		slow     bool          // placed on the slow engine
	}{
		{name: "no SLO", slow: true},
		{name: "within the SLO", slo: time.Second, slow: true},
		{name: "past the SLO", slo: 300 * time.Millisecond},
		{name: "past four times the soonest", perToken: 900 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s, r, clk := ttftPool(t, 3, 0)
			ups := r.Pool.Upstreams
			perToken := cmp.Or(tc.perToken, 400*time.Microsecond)
			alike.teachBut(ups, clk.Now(), 2, perToken)
			for _, u := range ups {
				u.SetEngineLoad(EngineLoad{KVCacheUsage: -1, CacheTokens: 4000}, 0)
			}
			fill(ups[0])
			fill(ups[1])
			var p fastjson.Parser
			req := chatRequest(t, s, &p, systemPrompt(7, 1500), "First?")
			req.SLO = tc.slo
			c := choose(t, s, &req)
			req.Release()
			if c.Upstream == ups[2] != tc.slow || !c.Predicted {
				t.Fatalf("%s (predicted %v, %v); want the slow engine %v", c.Upstream.Name, c.Predicted, c.Prediction.Total, tc.slow)
			}
		})
	}
}

// TestRoomTokenRatio: the engine's size is taken in the estimate's tokens
// by the ratio its model learned (here the engine counts a quarter more):
// a cache of 5,000 engine tokens holds 4,000 of the estimate's, 3,500 of
// them for prompts.
func TestRoomTokenRatio(t *testing.T) {
	_, _, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	for i := range 20 {
		est := 800 + 50*i
		u.Observe(&Choice{}, predict.Observation{End: clk.Now(), FirstToken: true, PromptTokens: est * 5 / 4, EstimatedTokens: est,
			CachedReported: true, Parts: predict.Parts{predict.Prefill: time.Duration(est) * time.Microsecond}})
	}
	u.SetEngineLoad(EngineLoad{KVCacheUsage: -1, CacheTokens: 5000}, 0)
	fill(u) // 3,000 held
	for _, tc := range []struct {
		tokens int
		fits   bool
	}{{400, true}, {500, true}, {600, false}, {1200, false}} {
		if got := u.fits(99, tc.tokens); got != tc.fits {
			t.Errorf("a prompt of %d tokens beside 3,000 in 3,500: fits %v, want %v", tc.tokens, got, tc.fits)
		}
	}
}
