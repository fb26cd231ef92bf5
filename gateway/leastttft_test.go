package gateway

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// ttftPool is a gateway with one least_ttft pool of n upstreams serving
// model "m", on a fake clock; entries is the prefix index's capacity (0:
// the default).
func ttftPool(t testing.TB, n, entries int) (*Gateway, *Snapshot, *Route, *clock.Fake) {
	t.Helper()
	return ttftPoolOf(t, ttftConfig(n, entries))
}

// ttftConfig is ttftPool's configuration, to change before ttftPoolOf.
func ttftConfig(n, entries int) *Config {
	var ups []string
	for i := range n {
		ups = append(ups, fmt.Sprintf("http://10.1.%d.%d:8000", i/200, i%200+1))
	}
	return &Config{
		Routes:             []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:              []PoolConfig{{Name: "p", Upstreams: ups, Policy: PolicyLeastTTFT}},
		PrefixIndexEntries: entries,
	}
}

// ttftPoolOf is ttftPool with cfg (ttftConfig's, changed).
func ttftPoolOf(t testing.TB, cfg *Config) (*Gateway, *Snapshot, *Route, *clock.Fake) {
	t.Helper()
	g, clk := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	return g, s, s.Routes()[0], clk
}

// engine is a synthetic engine's cost: what one of its requests measures.
type engine struct {
	perToken time.Duration // prefill, per uncached prompt token
	perAhead time.Duration // queue, per request of this replica's in flight
}

// observation is a request of tokens (cached of them from the prefix
// cache) that ended at end with inFlight others on the engine: its split
// as e would measure it.
func (e engine) observation(end time.Duration, tokens, cached int, inFlight int64) predict.Observation {
	return predict.Observation{
		End: end, FirstToken: true, PromptTokens: tokens, CachedTokens: cached, CachedReported: true,
		Load: predict.Load{InFlight: inFlight},
		Parts: predict.Parts{
			predict.Queue:       time.Duration(inFlight) * e.perAhead,
			predict.Preparation: time.Millisecond,
			predict.Prefill:     5*time.Millisecond + time.Duration(tokens-cached)*e.perToken,
			predict.FirstDecode: 20 * time.Millisecond,
			predict.Transport:   time.Millisecond,
		},
	}
}

// teach gives u's model 40 observations of e ending at end: prompts of 200
// to 2,000 tokens, 0 to 7 requests in flight.
func (e engine) teach(u *Upstream, end time.Duration) {
	for i := range 40 {
		u.Observe(&Choice{}, e.observation(end, 200+200*(i%10), 0, int64(i%8)))
	}
}

// teachBut teaches every upstream of ups e as teach does, but ups[odd],
// whose prefill costs perToken a token.
func (e engine) teachBut(ups []*Upstream, end time.Duration, odd int, perToken time.Duration) {
	for i, u := range ups {
		if i == odd {
			engine{perToken: perToken, perAhead: e.perAhead}.teach(u, end)
		} else {
			e.teach(u, end)
		}
	}
}

// alike is the engine the tests' alike upstreams measure: 100 µs a prompt
// token, 100 ms a request ahead.
var alike = engine{perToken: 100 * time.Microsecond, perAhead: 100 * time.Millisecond}

// alikePool is ttftPool of three upstreams, each taught alike.
func alikePool(t testing.TB) (*Gateway, *Snapshot, *Route) {
	t.Helper()
	g, s, r, clk := ttftPool(t, 3, 0)
	for _, u := range r.Pool.Upstreams {
		alike.teach(u, clk.Now())
	}
	return g, s, r
}

// served records in g's prefix index that each of ups, in turn, served a
// chat of system and a first question, as Commit records it.
func served(t testing.TB, g *Gateway, s *Snapshot, p *fastjson.Parser, system string, ups ...*Upstream) {
	t.Helper()
	req := chatRequest(t, s, p, system, "First?")
	for _, u := range ups {
		g.index.Record(req.prompt.chain, u.id, u.computed.Load())
	}
	req.Release()
}

// hashHome is the upstream of ups rendezvous hashing prefers for req's first
// message: where place puts a new prompt.
func hashHome(req *Request, ups []*Upstream) *Upstream {
	key, home := req.prompt.chain[req.prompt.lead-1], ups[0]
	for _, u := range ups[1:] {
		if prefix.Weight(key, u.hash) > prefix.Weight(key, home.hash) {
			home = u
		}
	}
	return home
}

// ttftRequest is a valid request on r of tokens, with no prompt known.
func ttftRequest(r *Route, tokens int) *Request { return &Request{Route: r, PromptTokens: tokens} }

// streamRequest is ttftRequest streamed: Commit tracks it until its first
// token (Choice.Prefilled).
func streamRequest(r *Route, tokens int) *Request {
	return &Request{Route: r, PromptTokens: tokens, Stream: true}
}

// chatRequest checks a chat body of a system prompt and a question, for
// model "m".
func chatRequest(t testing.TB, s *Snapshot, p *fastjson.Parser, system, question string) Request {
	t.Helper()
	body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, question)
	req, rej := s.CheckRequest(p, Chat, body)
	if rej != nil {
		t.Fatal(rej)
	}
	if req.prompt == nil || len(req.prompt.chain) == 0 {
		t.Fatal("no chain for a least_ttft pool's request")
	}
	return req
}

// systemPrompt is a system prompt of about tokens tokens, told apart by i.
func systemPrompt(i, tokens int) string {
	return fmt.Sprintf("You are assistant %d. ", i) + strings.Repeat(fmt.Sprintf("Rule %d: be brief. ", i), tokens*4/16)
}

func choose(t testing.TB, s *Snapshot, req *Request) Choice {
	t.Helper()
	c, rej := s.Choose(req, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	s.Commit(req, &c)
	c.Prefilled() // nothing of it stays in flight (as outstanding does not: it is not admitted)
	return c
}

// TestRoundRobin: round_robin takes the available upstreams in turn,
// whatever their load, skipping the one excepted.
func TestRoundRobin(t *testing.T) {
	g, s, r, _ := threeUpstreams(t, PoolConfig{Policy: PolicyRoundRobin, Ejection: EjectionConfig{ConsecutiveFailures: 1, Duration: time.Minute}})
	ups := r.Pool.Upstreams
	for range 5 { // a loaded: still its turn
		if _, rej := ups[0].Acquire(nil); rej != nil {
			t.Fatal(rej)
		}
	}
	index := func(u *Upstream) int {
		for i, v := range ups {
			if v == u {
				return i
			}
		}
		return -1
	}
	tests := []struct {
		name   string
		except *Upstream
		eject  *Upstream
		want   []int // the picks' upstreams, from where the rotation is
	}{
		{name: "all", want: []int{0, 1, 2, 0, 1, 2}},
		{name: "except b", except: ups[1], want: []int{0, 2, 2, 0, 2, 2}},
		{name: "c ejected", eject: ups[2], want: []int{0, 1, 0, 0, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.eject != nil {
				g.Done(tt.eject, false)
			}
			r.Pool.rr.Store(2) // the next pick starts at a
			var got []int
			for range len(tt.want) {
				u, rej := s.Pick(r, tt.except)
				if rej != nil {
					t.Fatal(rej)
				}
				got = append(got, index(u))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("picks %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLeastTTFTSkew: with the models taught, the lowest prediction wins,
// the requests in flight counted: an upstream whose prefill is twice as
// slow gets fewer requests, one whose prefill is half as fast again fewer
// still, and each gets some once the others' queues make up the
// difference.
func TestLeastTTFTSkew(t *testing.T) {
	engines := []engine{
		{perToken: 100 * time.Microsecond, perAhead: 150 * time.Millisecond},
		{perToken: 100 * time.Microsecond, perAhead: 150 * time.Millisecond},
		{perToken: 200 * time.Microsecond, perAhead: 150 * time.Millisecond},
		{perToken: 400 * time.Microsecond, perAhead: 150 * time.Millisecond},
	}
	_, s, r, clk := ttftPool(t, len(engines), 0)
	ups := r.Pool.Upstreams
	for i, e := range engines {
		e.teach(ups[i], clk.Now())
	}
	counts := make([]int, len(ups))
	var releases []func()
	for range 400 {
		c := choose(t, s, ttftRequest(r, 1000))
		if !c.Predicted || c.Affinity {
			t.Fatalf("choice %+v: want the predictions'", c)
		}
		for i, u := range ups {
			if u == c.Upstream {
				counts[i]++
			}
		}
		release, rej := c.Upstream.Acquire(nil)
		if rej != nil {
			t.Fatal(rej)
		}
		if releases = append(releases, release); len(releases) > 8 { // 8 in flight
			releases[0]()
			releases = releases[1:]
		}
		clk.Advance(10 * time.Millisecond)
	}
	t.Logf("requests per upstream: %v", counts)
	if !(counts[0] > counts[2] && counts[1] > counts[2] && counts[2] > counts[3] && counts[3] > 0) {
		t.Fatalf("requests per upstream %v: want fewer to the slower prefills, and some to each", counts)
	}
}

// TestLeastTTFTSlowdown: the fastest upstream, whose prefill triples
// mid-run, is avoided within a few seconds of request-clock time: its
// first slow request barely moves its prediction (an outlier), the next
// ones do.
func TestLeastTTFTSlowdown(t *testing.T) {
	_, s, r, clk := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	fast := engine{perToken: 95 * time.Microsecond, perAhead: 100 * time.Millisecond}
	slow := engine{perToken: 300 * time.Microsecond, perAhead: 100 * time.Millisecond}
	others := alike
	fast.teach(ups[0], clk.Now())
	for _, u := range ups[1:] {
		others.teach(u, clk.Now())
	}
	const change = 10 * time.Second
	var before, after, probes int
	var last time.Duration
	for clk.Now() < change+20*time.Second { // one request every 50 ms, observed as it ends
		c := choose(t, s, ttftRequest(r, 1000))
		e := others
		if c.Upstream == ups[0] {
			e = fast
			switch {
			case clk.Now() < change:
				before++
			case c.Probe:
				e, probes = slow, probes+1
			default:
				e, after, last = slow, after+1, clk.Now()
			}
		}
		clk.Advance(50 * time.Millisecond)
		c.Upstream.Observe(&c, e.observation(clk.Now(), 1000, 0, 0))
	}
	t.Logf("%d requests before, %d after, the last %v after; %d probes", before, after, last-change, probes)
	if before < 100 || after < 2 || last-change > 3*time.Second {
		t.Fatalf("the fastest upstream took %d requests before it slowed and %d after, the last %v after; want all before, none past 3 s",
			before, after, last-change)
	}
	if probes != 1 { // 10 s past its last observation, and 10 s after the probe's, past the run
		t.Fatalf("%d probes of the slowed upstream, want one, %v past its last observation", probes, probeAge)
	}
}

// TestLeastTTFTProbe: an upstream predicted slow by observations long
// past (a queue at a cold start) is sent a request, a probe, once nothing
// has been observed there for probeAge, while it has nothing in flight,
// and never a request that states an SLO, nor while no upstream of the
// pool has been measured that recently (a light load). It is now the
// fastest: probes follow one another until its prediction has it chosen.
func TestLeastTTFTProbe(t *testing.T) {
	_, s, r, clk := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	e := alike
	for _, u := range ups {
		e.teach(u, clk.Now())
	}
	for range 3 { // a queue of 5 s with nothing in flight from here
		o := e.observation(clk.Now(), 1000, 0, 0)
		o.Parts[predict.Queue] = 5 * time.Second
		ups[2].Observe(&Choice{}, o)
	}
	taught := clk.Now()
	clk.Advance(probeAge)
	for range len(ups) { // each upstream first in rotation once
		if c, _ := s.Choose(ttftRequest(r, 1000), nil); c.Probe {
			t.Fatalf("a probe of %s, every upstream measured %v ago", c.Upstream.Name, probeAge)
		}
	}
	for _, u := range ups[:2] {
		e.teach(u, clk.Now())
	}
	faster := engine{perToken: 50 * time.Microsecond}
	start := clk.Now()
	var probes, shares int
	for shares < 3 { // one request each 100 ms, observed as it ends
		if clk.Now()-start > time.Minute {
			t.Fatalf("c:2 took %d requests in a minute, after %d probes; want its share", shares, probes)
		}
		if clk.Now()-taught >= probeAge && probes == 0 { // c:2 stale and idle: not for a request with an SLO
			withSLO := ttftRequest(r, 1000)
			withSLO.SLO = time.Hour
			if c, _ := s.Choose(withSLO, nil); c.Probe || c.Upstream == ups[2] {
				t.Fatalf("a request with an SLO probed %s", c.Upstream.Name)
			}
		}
		c := choose(t, s, ttftRequest(r, 1000))
		switch {
		case c.Probe && c.Upstream != ups[2]: // not chosen for probeAge, its prediction as good
		case c.Probe:
			if probes++; clk.Now()-taught < probeAge || !c.Predicted {
				t.Fatalf("probe %d of c:2 %v after its last observation, predicted %v; want none sooner than %v", probes, clk.Now()-taught, c.Predicted, probeAge)
			}
			release, rej := c.Upstream.Acquire(nil)
			if rej != nil {
				t.Fatal(rej)
			}
			withSLO := ttftRequest(r, 1000)
			withSLO.SLO = time.Hour
			for _, req := range []*Request{ttftRequest(r, 1000), withSLO} {
				if again := choose(t, s, req); again.Probe || again.Upstream == ups[2] {
					t.Fatalf("c:2 probed again (%s) while a probe is in flight", again.Upstream.Name)
				}
			}
			release()
		case c.Upstream == ups[2]:
			shares++
		}
		clk.Advance(100 * time.Millisecond)
		if c.Upstream == ups[2] {
			c.Upstream.Observe(&c, faster.observation(clk.Now(), 1000, 0, 0))
		} else {
			c.Upstream.Observe(&c, e.observation(clk.Now(), 1000, 0, 0))
		}
	}
	t.Logf("c:2 took its share %v in, after %d probes", clk.Now()-start, probes)
	if probes == 0 {
		t.Fatal("c:2 took its share unprobed")
	}
	if ups[2].reprobe.Load() {
		t.Fatal("c:2 chosen by its prediction, and still to be probed again")
	}
}

// hitEngine is a synthetic engine whose hits cost perToken a token past
// the cached prefix: it is taught hits of 1,500 tokens, 1,460 of them
// cached; the requests of sloPool's prompt compute about 10.
type hitEngine struct{ perToken time.Duration }

// observation is a hit of hitEngine ending at end.
func (e hitEngine) observation(end time.Duration) predict.Observation {
	return engine{perToken: e.perToken}.observation(end, 1500, 1460, 0)
}

// teach gives u's model 40 of e's hits ending at end.
func (e hitEngine) teach(u *Upstream, end time.Duration) {
	for range 40 {
		u.Observe(&Choice{}, e.observation(end))
	}
}

// sloAsk chooses for req, holding an SLO of slo, spent before routing,
// after except (nil: a first choice); refused says RefuseSLO refused it.
func sloAsk(t *testing.T, s *Snapshot, req *Request, slo, spent time.Duration, except *Upstream) (c Choice, refused bool) {
	t.Helper()
	req.SLO, req.Spent = slo, spent
	c, rej := s.Choose(req, except)
	if rej != nil {
		t.Fatal(rej)
	}
	return c, RefuseSLO(&c, slo, spent) != nil
}

// sloPool is ttftPool of the upstreams e taught, each as e says, every one
// recorded as serving a system prompt's chain; ask chooses for a request
// of it and a question of its own (Commit left to the caller) and returns
// it to release.
func sloPool(t *testing.T, e ...hitEngine) (s *Snapshot, ups []*Upstream, clk *clock.Fake, ask func(slo, spent time.Duration, except *Upstream) (*Request, Choice, bool)) {
	t.Helper()
	g, s, r, clk := ttftPool(t, len(e), 0)
	ups = r.Pool.Upstreams
	var p fastjson.Parser
	system := systemPrompt(5, 1500)
	served(t, g, s, &p, system, ups...)
	for i, u := range ups {
		e[i].teach(u, clk.Now())
	}
	var asked int
	ask = func(slo, spent time.Duration, except *Upstream) (*Request, Choice, bool) {
		asked++ // a question of its own: only the system prompt is held
		req := chatRequest(t, s, &p, system, fmt.Sprintf("Question %d?", asked))
		c, refused := sloAsk(t, s, &req, slo, spent, except)
		return &req, c, refused
	}
	return s, ups, clk, ask
}

// TestLeastTTFTStaleRefusal: a route whose every request states an SLO is
// not refused for ever on what its engines did long ago. While the models
// are fresh, a request predicted past its SLO is refused; once the soonest
// upstream that holds its prompt was measured probeAge ago, the next is
// sent there as a probe past its SLO (never while one is in flight
// there), and while those meet the SLO they follow one another until the
// model predicts it met and requests are admitted on their prediction. A
// request of a prompt no upstream holds is refused all the while: probing
// with it would hold an engine for a whole prompt's prefill.
func TestLeastTTFTStaleRefusal(t *testing.T) {
	slow := hitEngine{perToken: 100 * time.Millisecond} // a hit: ~1 s
	s, ups, clk, ask := sloPool(t, slow, slow)
	const slo = 500 * time.Millisecond
	if req, c, refused := ask(slo, 0, nil); !refused {
		t.Fatalf("fresh models predicting %v: not refused (%+v)", c.Prediction.Total, c)
	} else {
		req.Release()
	}
	clk.Advance(probeAge)
	newPrompt := ttftRequest(ups[0].g.Snapshot().Routes()[0], 1000)
	if c, refused := sloAsk(t, s, newPrompt, slo, 0, nil); c.PastSLO || !refused {
		t.Fatalf("a prompt no upstream holds, the models stale: %+v, refused %v; want refused", c, refused)
	}
	fast := hitEngine{perToken: 2 * time.Millisecond} // ~50 ms now
	var probes int
	for {
		if probes > 40 {
			t.Fatalf("still probing after %d probes", probes)
		}
		req, c, refused := ask(slo, 0, nil)
		if refused {
			t.Fatalf("refused after %d probes (predicted %v, last observed %v ago)", probes, c.Prediction.Total, c.Prediction.Age)
		}
		if !c.Probe {
			req.Release()
			t.Logf("admitted on its prediction (%v) after %d probes", c.Prediction.Total, probes)
			break
		}
		probes++
		if !c.PastSLO || !c.Predicted || c.Prediction.Total <= slo || c.Passed != slo {
			t.Fatalf("probe %d: %+v; want a probe past the SLO, predicted past it", probes, c)
		}
		s.Commit(req, &c)
		req.Release()
		release, rej := c.Upstream.Acquire(nil)
		if rej != nil {
			t.Fatal(rej)
		}
		if again, c2, _ := ask(slo, 0, nil); c2.Upstream == c.Upstream && c2.Probe {
			t.Fatalf("%s probed again while a probe is in flight", c.Upstream.Name)
		} else {
			again.Release()
		}
		clk.Advance(100 * time.Millisecond)
		c.Upstream.Observe(&c, fast.observation(clk.Now()))
		release()
	}
	if probes == 0 {
		t.Fatal("admitted with no probe")
	}
}

// TestLeastTTFTAfterSLOProbe: while a probe past its SLO computes on an
// upstream, a request routed after it is predicted to wait for its first
// token there (predict.Load.Ahead): one whose SLO its own prediction would
// meet is refused while the probe is ahead, not admitted behind it to miss
// its SLO, and admitted again once the probe's first token has come.
func TestLeastTTFTAfterSLOProbe(t *testing.T) {
	slow := hitEngine{perToken: 100 * time.Millisecond} // a hit: ~1 s
	s, _, clk, ask := sloPool(t, slow)
	clk.Advance(probeAge)
	const slo = 1500 * time.Millisecond // a hit's ~1 s meets it; behind another, it does not
	follow := func(when string, behind bool) {
		t.Helper()
		req, c, refused := ask(slo, 0, nil)
		defer req.Release()
		if refused != behind || (c.Load.Ahead > 0) != behind || c.Probe || !c.Predicted {
			t.Fatalf("%s: refused %v, waiting %v ahead (want refused and a wait: %v), probe %v, predicted %v: queue %v of %v",
				when, refused, c.Load.Ahead, behind, c.Probe, c.Predicted, c.Prediction.Parts[predict.Queue], c.Prediction.Total)
		}
	}
	follow("no probe yet", false)

	req, probe, _ := ask(500*time.Millisecond, 0, nil)
	if !probe.PastSLO {
		t.Fatalf("a request of 500 ms against ~1 s predicted, the model stale: %+v; want a probe past its SLO", probe)
	}
	req.Stream = true // tracked until its first token (Commit)
	s.Commit(req, &probe)
	req.Release()
	follow("the probe ahead", true)
	probe.Prefilled()
	follow("the probe's first token come", false)
}

// TestLeastTTFTSLOProbeBackoff: on a route whose SLO no upstream can
// meet, each probe past the SLO that misses it, as predicted, or ends
// without a first token, doubles the wait before the next
// (sloProbeAge): probes are sent 10, 20, 40, 80, 160 and 160 s apart,
// not every 10 s; a request routed on its prediction starts the count
// again. The test asks each 10 s.
func TestLeastTTFTSLOProbeBackoff(t *testing.T) {
	slow := hitEngine{perToken: 100 * time.Millisecond}
	s, ups, clk, ask := sloPool(t, slow)
	u := ups[0]
	const slo = 500 * time.Millisecond
	probes := func(n int) []time.Duration {
		var gaps []time.Duration
		last := clk.Now()
		for asks := 0; len(gaps) < n; asks++ {
			if asks > 200 {
				t.Fatalf("%d asks, %d probes past the SLO, %v apart", asks, len(gaps), gaps)
			}
			clk.Advance(probeAge)
			req, c, refused := ask(slo, 0, nil)
			if refused {
				req.Release()
				continue
			}
			if !c.PastSLO {
				t.Fatalf("admitted, not as a probe past the SLO: %+v", c)
			}
			s.Commit(req, &c)
			req.Release()
			gaps = append(gaps, clk.Now()-last)
			last = clk.Now()
			if len(gaps)%2 == 0 { // as slow as predicted; the others end without a first token
				u.Observe(&c, slow.observation(clk.Now()))
			} else {
				c.Prefilled()
			}
		}
		return gaps
	}
	want := []time.Duration{probeAge, 2 * probeAge, 4 * probeAge, 8 * probeAge, 16 * probeAge, 16 * probeAge}
	if gaps := probes(6); !slices.Equal(gaps, want) {
		t.Fatalf("probes past the SLO sent %v apart; want %v", gaps, want)
	}
	u.Observe(&Choice{Predicted: true}, slow.observation(clk.Now())) // routed on its prediction
	if gaps := probes(2); !slices.Equal(gaps, want[:2]) {
		t.Fatalf("after a request routed on its prediction: probes %v apart; want %v", gaps, want[:2])
	}
}

// TestLeastTTFTSLOProbeOthers: the probe past an SLO goes to the soonest
// upstream that may take one, not only to the soonest: an upstream
// predicted slower than the soonest, from long ago, is measured once the
// soonest has been probed and missed as predicted. A retry's choice
// (except set) and a request that has spent its SLO before routing are
// never sent past it.
func TestLeastTTFTSLOProbeOthers(t *testing.T) {
	aHit, bHit := hitEngine{perToken: 80 * time.Millisecond}, hitEngine{perToken: 200 * time.Millisecond} // ~800 ms, ~2 s
	s, ups, clk, ask := sloPool(t, aHit, bHit)
	a, b := ups[0], ups[1]
	const slo = 500 * time.Millisecond
	clk.Advance(probeAge)
	if req, c, _ := ask(slo, 0, a); c.PastSLO {
		t.Fatalf("a retry's choice: %+v; want no probe past the SLO", c)
	} else {
		req.Release()
	}
	if req, c, refused := ask(slo, slo, nil); !refused || c.PastSLO {
		t.Fatalf("the SLO spent before routing: refused %v, %+v; want refused", refused, c)
	} else {
		req.Release()
	}
	req, c, _ := ask(slo, 0, nil)
	if !c.PastSLO || c.Upstream != a {
		t.Fatalf("first probe past the SLO: %+v; want it on %s, the soonest", c, a.Name)
	}
	s.Commit(req, &c)
	req.Release()
	a.Observe(&c, aHit.observation(clk.Now()))
	clk.Advance(probeAge)
	if req, c, _ := ask(slo, 0, nil); !c.PastSLO || c.Upstream != b {
		t.Fatalf("after %s missed as predicted: %+v; want a probe past the SLO on %s", a.Name, c, b.Name)
	} else {
		req.Release()
	}
}

// TestLeastTTFTBound: an upstream predicted at zero is not buried: no
// choice takes an upstream at or over the bound, ⌈1.25·(total+1)/n⌉ plus
// the pool's slack. With the default slack it takes the first requests
// all (the ones that share a prefix stay where it is cached); with none,
// a second request in flight never joins the first.
func TestLeastTTFTBound(t *testing.T) {
	for _, tc := range []struct {
		slack int // LoadSlack
		first int // the first requests all on the upstream predicted at 0: the least k ≥ bound(k, 3)
	}{
		{0, 15}, // ⌈1.25·16/3⌉ + 8
		{-1, 1}, // ⌈1.25·2/3⌉
	} {
		cfg := ttftConfig(3, 0)
		cfg.Pools[0].LoadSlack = tc.slack
		_, s, r, clk := ttftPoolOf(t, cfg)
		ups := r.Pool.Upstreams
		ups[0].Observe(&Choice{}, predict.Observation{End: clk.Now(), FirstToken: true, PromptTokens: 1000}) // predicts 0
		for _, u := range ups[1:] {
			alike.teach(u, clk.Now())
		}
		var total int64
		first := -1
		for i := range 60 {
			c := choose(t, s, ttftRequest(r, 1000))
			if bound := r.Pool.bound(total, len(ups)); c.Upstream.Outstanding() >= bound {
				t.Fatalf("slack %d: chose %s with %d outstanding of %d, bound %d", tc.slack, c.Upstream.Name, c.Upstream.Outstanding(), total, bound)
			}
			if c.Upstream != ups[0] && first < 0 {
				first = i
			}
			if _, rej := c.Upstream.Acquire(nil); rej != nil {
				t.Fatal(rej)
			}
			total++
		}
		if first != tc.first {
			t.Errorf("slack %d: the first %d requests went to the upstream predicted at 0, want %d", tc.slack, first, tc.first)
		}
		if a, b := ups[0].Outstanding(), ups[1].Outstanding(); a <= b {
			t.Errorf("slack %d: outstanding %d on the upstream predicted at 0, %d on the next: want it most", tc.slack, a, b)
		}
	}
}

// TestLeastTTFTAffinity: with equal models, a request whose prefix the
// index recorded under an upstream goes there (its prefill predicted
// shorter by the cached blocks), and is recorded there again; a prompt
// with no history goes by the predictions alone.
func TestLeastTTFTAffinity(t *testing.T) {
	g, s, r := alikePool(t)
	ups := r.Pool.Upstreams
	var p fastjson.Parser
	system := systemPrompt(1, 1500)
	served(t, g, s, &p, system, ups[1])
	for i := range 10 {
		req := chatRequest(t, s, &p, system, fmt.Sprintf("Question %d?", i))
		c := choose(t, s, &req)
		req.Release()
		if c.Upstream != ups[1] || c.Expected.Cached < 1400 || !c.Predicted || c.Affinity {
			t.Fatalf("request %d: %s, %d tokens expected cached, predicted %v, affinity %v; want b:1 by its cached prefix",
				i, c.Upstream.Name, c.Expected.Cached, c.Predicted, c.Affinity)
		}
	}
	other := chatRequest(t, s, &p, systemPrompt(2, 1500), "What is a token?")
	if c := choose(t, s, &other); c.Expected.Cached != 0 {
		t.Fatalf("a new prompt expected %d tokens cached on %s", c.Expected.Cached, c.Upstream.Name)
	}
	other.Release()
}

// TestLeastTTFTEarlierPlace: an upstream keeps its copy of a prefix after
// another upstream served it too. The prefix was computed on c and then
// on a, which is now busy: the request goes back to c, where its prefix
// is cached, rather than to b, which would compute it (and is faster per
// token, so a miss anywhere would go there).
func TestLeastTTFTEarlierPlace(t *testing.T) {
	g, s, r, clk := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	alike.teachBut(ups, clk.Now(), 1, 90*time.Microsecond)
	var p fastjson.Parser
	system := systemPrompt(4, 1500)
	served(t, g, s, &p, system, ups[2], ups[0])
	for range 5 {
		if _, rej := ups[0].Acquire(nil); rej != nil {
			t.Fatal(rej)
		}
	}
	req := chatRequest(t, s, &p, system, "Second?")
	c := choose(t, s, &req)
	req.Release()
	if c.Upstream != ups[2] || c.Expected.Cached < 1400 || c.Expected.Distance != 0 {
		t.Fatalf("%s, expected %+v; want %s, where the prefix is still cached", c.Upstream.Name, c.Expected, ups[2].Name)
	}
}

// TestLeastTTFTDistance: the distance a prefix's residency is judged by is
// the prompt tokens its upstream was sent to compute since it last served
// the prefix: other prompts whole, and of a request expected to hit only
// the part past its cached blocks, counted before the prefix is marked
// served again; and an expected hit the engine reported computed, once it
// has.
func TestLeastTTFTDistance(t *testing.T) {
	_, s, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
	var p fastjson.Parser
	system := systemPrompt(5, 1500)
	route := func(system, question string) (Choice, int) {
		req := chatRequest(t, s, &p, system, question)
		defer req.Release()
		return choose(t, s, &req), req.PromptTokens
	}
	if c, _ := route(system, "First?"); c.Expected != (predict.Expected{}) {
		t.Fatalf("a new prompt: expected %+v", c.Expected)
	}
	_, other := route(systemPrompt(6, 800), "Elsewhere?")
	before := u.computed.Load()
	c, tokens := route(system, "Second?")
	if c.Expected.Cached == 0 || c.Expected.Distance != uint64(other) || c.Prediction.Evicted {
		t.Fatalf("after another prompt of %d tokens: expected %+v, evicted %v", other, c.Expected, c.Prediction.Evicted)
	}
	if got, want := u.computed.Load()-before, uint64(tokens-c.Expected.Cached); got != want {
		t.Fatalf("a hit of %d tokens, %d expected cached, counted %d computed; want %d", tokens, c.Expected.Cached, got, want)
	}
	third, _ := route(system, "Third?")
	if third.Expected.Distance != 0 {
		t.Fatalf("right after the prefix was served: distance %d, want 0", third.Expected.Distance)
	}
	// The engine reports the third computed whole: its prefix is counted
	// as computed after all, and the next request sees it in its distance.
	e := engine{perToken: 100 * time.Microsecond}
	u.Observe(&third, e.observation(clk.Now(), tokens, 0, 0))
	if c, _ := route(system, "Fourth?"); c.Expected.Distance != uint64(third.Expected.Cached) {
		t.Fatalf("after the engine computed an expected hit of %d tokens: distance %d, want them", third.Expected.Cached, c.Expected.Distance)
	}
	before = u.computed.Load()
	u.Observe(&c, e.observation(clk.Now(), tokens, tokens-40, 0)) // a hit: nothing to count
	if u.computed.Load() != before {
		t.Fatal("a hit was counted as computed")
	}
}

// TestLeastTTFTPlace: a prompt no upstream holds goes where rendezvous
// hashing on its first message prefers, when that upstream is predicted
// within twice the soonest and within the request's SLO; otherwise to the
// soonest. Here c computes a token in twice a's and b's time, so a new
// prompt whose home is c costs it about twice as much there.
func TestLeastTTFTPlace(t *testing.T) {
	_, s, r, clk := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	engine{perToken: 100 * time.Microsecond}.teachBut(ups, clk.Now(), 2, 190*time.Microsecond)
	var p fastjson.Parser
	next := 100
	homed := func(u *Upstream) string { // a new system prompt whose home is u
		for i := next; ; i++ {
			req := chatRequest(t, s, &p, systemPrompt(i, 1500), "?")
			home := hashHome(&req, ups)
			req.Release()
			if home == u {
				next = i + 1
				return systemPrompt(i, 1500)
			}
		}
	}
	for _, tc := range []struct {
		name     string
		slo      time.Duration
		want     *Upstream
		affinity bool
	}{
		{"its home, within twice the soonest", 0, ups[2], true},
		{"the soonest, when the home would miss the SLO", 200 * time.Millisecond, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			system := homed(ups[2])
			req := chatRequest(t, s, &p, system, tc.name)
			req.SLO = tc.slo
			c := choose(t, s, &req)
			req.Release()
			if tc.want == nil && (c.Upstream == ups[2] || c.Affinity) || tc.want != nil && (c.Upstream != tc.want || !c.Affinity) {
				t.Fatalf("%s (affinity %v, predicted %v); want %v", c.Upstream.Name, c.Affinity, c.Prediction.Total, tc.want)
			}
			// The next request of the prompt finds it where it went.
			req = chatRequest(t, s, &p, system, tc.name+" again")
			again := choose(t, s, &req)
			req.Release()
			if again.Upstream != c.Upstream || again.Expected.Cached == 0 {
				t.Fatalf("the next request: %s, expected %+v; want %s, cached", again.Upstream.Name, again.Expected, c.Upstream.Name)
			}
		})
	}

	// A lone message, new: nothing would find it where it was placed, so
	// the soonest.
	lone := func() string {
		for i := 0; ; i++ {
			body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":%q}]}`, homed(ups[2])+fmt.Sprint(i))
			req, rej := s.CheckRequest(&p, Chat, body)
			if rej != nil {
				t.Fatal(rej)
			}
			home := hashHome(&req, ups)
			req.Release()
			if home == ups[2] {
				return string(body)
			}
		}
	}()
	req, rej := s.CheckRequest(&p, Chat, []byte(lone))
	if rej != nil {
		t.Fatal(rej)
	}
	if c := choose(t, s, &req); c.Upstream == ups[2] || c.Affinity {
		t.Fatalf("a lone new message whose home is %s: %s, affinity %v; want the soonest", ups[2].Name, c.Upstream.Name, c.Affinity)
	}
	req.Release()

	// Twice as slow is too slow: a home at 2.5 times the soonest is passed
	// over (for the next the hashing prefers within twice).
	engine{perToken: 250 * time.Microsecond}.teach(ups[2], clk.Now())
	req = chatRequest(t, s, &p, homed(ups[2]), "?")
	c := choose(t, s, &req)
	req.Release()
	if c.Upstream == ups[2] {
		t.Fatalf("a home at 2.5 times the soonest: %s, affinity %v; want another", c.Upstream.Name, c.Affinity)
	}
}

// TestLeastTTFTColdStart: while no upstream has a model, requests go by
// prefix affinity: where their prefix was recorded, else where rendezvous
// hashing on the first message points, under the load bound.
func TestLeastTTFTColdStart(t *testing.T) {
	g, s, r, _ := ttftPool(t, 3, 0)
	ups := r.Pool.Upstreams
	var p fastjson.Parser
	system := systemPrompt(3, 1000)
	req := chatRequest(t, s, &p, system, "First?")
	key := req.prompt.chain[req.prompt.lead-1]
	var want *Upstream // rendezvous' choice
	for _, u := range ups {
		if want == nil || prefix.Weight(key, u.hash) > prefix.Weight(key, want.hash) {
			want = u
		}
	}
	c := choose(t, s, &req)
	req.Release()
	if c.Upstream != want || !c.Affinity || c.Expected.Cached != 0 {
		t.Fatalf("first request: %+v; want %s by rendezvous", c, want.Name)
	}
	// The same system prompt, another question: the index's match.
	req = chatRequest(t, s, &p, system, "Second?")
	c = choose(t, s, &req)
	req.Release()
	if c.Upstream != want || !c.Affinity || c.Expected.Cached == 0 {
		t.Fatalf("second request: %+v; want %s by its recorded prefix", c, want.Name)
	}
	// Recorded elsewhere: there.
	other := ups[0]
	if other == want {
		other = ups[1]
	}
	req = chatRequest(t, s, &p, system, "Third?")
	g.index.Record(req.prompt.chain, other.id, other.computed.Load())
	if c = choose(t, s, &req); c.Upstream != other || !c.Affinity {
		t.Fatalf("third request: %+v; want %s, where it was recorded", c, other.Name)
	}
	req.Release()
	// Past the bound: elsewhere.
	for other.Outstanding() < r.Pool.bound(other.Outstanding(), len(ups)) {
		if _, rej := other.Acquire(nil); rej != nil {
			t.Fatal(rej)
		}
	}
	req = chatRequest(t, s, &p, system, "Fourth?")
	if c = choose(t, s, &req); c.Upstream == other || !c.Affinity {
		t.Fatalf("fourth request: %+v; want another than %s, at the bound", c, other.Name)
	}
	req.Release()
}

// TestLeastTTFTUnpredicted: an upstream with no prediction for a request
// takes it as a probe while it has nothing in flight, then is passed over:
// one with no model yet, whatever the request; one whose model has seen
// only hits, for a prompt it would compute, unless the request states an
// SLO, which that model cannot vouch for.
func TestLeastTTFTUnpredicted(t *testing.T) {
	hits := engine{perToken: 100 * time.Microsecond}
	for _, tc := range []struct {
		name  string
		teach func(u *Upstream, now time.Duration)
		slo   bool // an SLO request may probe it
	}{
		{"no model", func(*Upstream, time.Duration) {}, true},
		{"only hits", func(u *Upstream, now time.Duration) {
			for i := range 4 {
				o := hits.observation(now, 1000+i, 990+i, 0)
				o.Expected = predict.Expected{Cached: 990}
				u.Observe(&Choice{}, o)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s, r, clk := ttftPool(t, 3, 0)
			ups := r.Pool.Upstreams
			for _, u := range ups[:2] {
				engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
			}
			tc.teach(ups[2], clk.Now())
			var p fastjson.Parser
			for i, slo := range []time.Duration{0, time.Hour} {
				req := chatRequest(t, s, &p, systemPrompt(10+i, 1000), "New?")
				req.SLO = slo
				c, _ := s.Choose(&req, nil)
				if probe := slo == 0 || tc.slo; c.Probe != probe || probe && (c.Upstream != ups[2] || c.Predicted) || !probe && (c.Upstream == ups[2] || !c.Predicted) {
					t.Fatalf("SLO %v: %s %+v; want a probe of c:2 %v, else another by its prediction", slo, c.Upstream.Name, c, probe)
				}
				if c.Probe {
					release, rej := c.Upstream.Acquire(nil)
					if rej != nil {
						t.Fatal(rej)
					}
					again, _ := s.Choose(&req, nil)
					if again.Upstream == ups[2] || !again.Predicted {
						t.Fatalf("with the probe in flight: %s %+v; want another by its prediction", again.Upstream.Name, again)
					}
					release()
				}
				req.Release()
			}
			if !tc.slo {
				return
			}
			clk.Advance(probeAge) // the others measured long ago: c:2 is still the one to probe
			for range len(ups) {  // each upstream first in rotation once
				if c, _ := s.Choose(ttftRequest(r, 1000), nil); !c.Probe || c.Upstream != ups[2] {
					t.Fatalf("the others measured %v ago: %s %+v; want a probe of c:2", probeAge, c.Upstream.Name, c)
				}
			}
		})
	}
}

// TestLeastTTFTIndexBounded: a flood of unique prompts through Choose
// fills the prefix index to its capacity and no further, the models cold
// or taught.
func TestLeastTTFTIndexBounded(t *testing.T) {
	for _, taught := range []bool{false, true} {
		t.Run(fmt.Sprint("taught ", taught), func(t *testing.T) {
			g, s, r, clk := ttftPool(t, 4, 1600)
			if taught {
				for _, u := range r.Pool.Upstreams {
					engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
				}
			}
			var p fastjson.Parser
			for i := range 400 { // ~12 blocks each: 3 times the capacity
				req := chatRequest(t, s, &p, systemPrompt(i, 150), "Why?")
				choose(t, s, &req)
				req.Release()
				clk.Advance(time.Millisecond)
			}
			if n, capacity := g.index.Len(), g.index.Capacity(); n != capacity || capacity != 1600 {
				t.Fatalf("%d entries in an index of %d, want it full at 1,600", n, capacity)
			}
		})
	}
}

// TestLeastTTFTIndexReload: the index outlives a reload that keeps its
// capacity, a new one comes with a new capacity, and none is kept without
// a least_ttft pool; upstreams keep their ids and models.
func TestLeastTTFTIndexReload(t *testing.T) {
	cfg := func(policy string, entries int) *Config {
		return &Config{
			Routes:             []RouteConfig{{Model: "m", Pool: "p"}},
			Pools:              []PoolConfig{{Name: "p", Upstreams: []string{"http://a:1", "http://b:1"}, Policy: policy}},
			PrefixIndexEntries: entries,
		}
	}
	g, _ := newGateway(t, cfg(PolicyLeastRequest, 0), Options{})
	if g.index != nil {
		t.Fatal("an index without a least_ttft pool")
	}
	a := g.Snapshot().Pools()[0].Upstreams[0]
	steps := []struct {
		policy  string
		entries int
		same    bool // the index before kept
	}{
		{PolicyLeastTTFT, 0, false},
		{PolicyLeastTTFT, 0, true},
		{PolicyLeastTTFT, 3200, false},
		{PolicyLeastLoad, 3200, false},
	}
	for i, st := range steps {
		before := g.index
		if err := g.Reload(cfg(st.policy, st.entries)); err != nil {
			t.Fatal(err)
		}
		p := g.Snapshot().Pools()[0]
		if (g.index == before) != st.same || (st.policy == PolicyLeastTTFT) != (g.index != nil) || p.index != g.index && st.policy == PolicyLeastTTFT {
			t.Fatalf("step %d: index %p, before %p", i, g.index, before)
		}
		if u := p.Upstreams[0]; u != a || u.id != a.id || u.model != a.model {
			t.Fatalf("step %d: upstream a remade", i)
		}
	}
}

// TestPromptChain: CheckRequest hashes the prompt's chain for a least_ttft
// pool only, chat and completions alike, seeded with the model's name.
func TestPromptChain(t *testing.T) {
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m*", Pool: "ttft"}, {Model: "other", Pool: "rr"}},
		Pools: []PoolConfig{
			{Name: "ttft", Upstreams: []string{"http://a:1"}, Policy: PolicyLeastTTFT},
			{Name: "rr", Upstreams: []string{"http://b:1"}, Policy: PolicyRoundRobin},
		},
	}
	g, _ := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	chat := func(model string) []byte {
		return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":"Why?"}]}`, model, systemPrompt(1, 100))
	}
	tests := []struct {
		name   string
		ep     Endpoint
		body   []byte
		blocks int // 0: no chain
	}{
		{"chat", Chat, chat("m1"), 9},
		{"completions", Completions, []byte(`{"model":"m1","prompt":"` + strings.Repeat("x", 200) + `"}`), 4},
		{"token ids", Completions, []byte(`{"model":"m1","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`), 2},
		{"another policy", Chat, chat("other"), 0},
	}
	var p fastjson.Parser
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, rej := s.CheckRequest(&p, tt.ep, tt.body)
			if rej != nil {
				t.Fatal(rej)
			}
			defer req.Release()
			blocks := 0
			if req.prompt != nil {
				blocks = len(req.prompt.chain)
				if req.prompt.lead == 0 {
					t.Error("no lead")
				}
			}
			if blocks != tt.blocks || (req.prompt == nil) != (tt.blocks == 0) {
				t.Fatalf("a chain of %d blocks (prompt %v), want %d", blocks, req.prompt != nil, tt.blocks)
			}
		})
	}
	a, _ := s.CheckRequest(&p, Chat, chat("m1"))
	defer a.Release()
	b, _ := s.CheckRequest(&p, Chat, chat("m2"))
	defer b.Release()
	if a.prompt.chain[0] == b.prompt.chain[0] {
		t.Fatal("two models' chains agree")
	}
}

// TestPickLeastTTFT: Pick in a least_ttft pool predicts without a prompt
// (no size, no affinity): the lowest prediction, where least_request would
// choose another, and another when it is excepted; with a model cold and
// no prompt to hash, the fewest outstanding requests.
func TestPickLeastTTFT(t *testing.T) {
	_, s, r, clk := ttftPool(t, 2, 0)
	a, b := r.Pool.Upstreams[0], r.Pool.Upstreams[1]
	acquire := func(u *Upstream) {
		if _, rej := u.Acquire(nil); rej != nil {
			t.Fatal(rej)
		}
	}
	alike.teach(a, clk.Now())
	acquire(a)
	for range 2 {
		if u, rej := s.Pick(r, nil); rej != nil || u != b {
			t.Fatalf("with b cold: %v %v, want b, the fewest outstanding", u, rej)
		}
	}
	engine{perToken: 100 * time.Microsecond}.teach(b, clk.Now()) // no queue
	acquire(b)
	acquire(b)
	for _, tt := range []struct {
		except, want *Upstream
	}{{nil, b}, {b, a}} {
		if u, rej := s.Pick(r, tt.except); rej != nil || u != tt.want {
			t.Fatalf("except %v: %v %v, want %s", tt.except, u, rej, tt.want.Name)
		}
	}
}

// TestBacklog: the engine time routed to an upstream runs one request
// after another from when each was routed, and drains as the gateway's
// clock moves.
func TestBacklog(t *testing.T) {
	_, _, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	if b := u.PredictLoad().Backlog; b != 0 {
		t.Fatalf("a new upstream's backlog: %v", b)
	}
	now := int64(clk.Now())
	u.addBacklog(now, 300*time.Millisecond)
	u.addBacklog(now, 200*time.Millisecond) // behind the first
	if b := u.PredictLoad().Backlog; b != 500*time.Millisecond {
		t.Fatalf("two requests' work: backlog %v, want 500ms", b)
	}
	clk.Advance(400 * time.Millisecond)
	if b := u.PredictLoad().Backlog; b != 100*time.Millisecond {
		t.Fatalf("400 ms on: backlog %v, want 100ms", b)
	}
	clk.Advance(time.Second)
	u.addBacklog(int64(clk.Now()), 50*time.Millisecond) // from now: the engine was idle
	if b := u.PredictLoad().Backlog; b != 50*time.Millisecond {
		t.Fatalf("after an idle spell: backlog %v, want 50ms", b)
	}
}

// TestLeastTTFTCommit: Choose changes nothing (a request the SLO refuses
// after it leaves no trace); Commit records the prompt where it went and
// adds its tokens and predicted engine time to the upstream's counts.
func TestLeastTTFTCommit(t *testing.T) {
	g, s, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
	var p fastjson.Parser
	req := chatRequest(t, s, &p, systemPrompt(8, 1500), "?")
	defer req.Release()
	c, rej := s.Choose(&req, nil)
	if rej != nil {
		t.Fatal(rej)
	}
	if m := g.index.Lookup(req.prompt.chain); m.Blocks != 0 || u.computed.Load() != 0 || u.PredictLoad().Backlog != 0 {
		t.Fatalf("after Choose alone: index %+v, computed %d, backlog %v; want nothing", m, u.computed.Load(), u.PredictLoad().Backlog)
	}
	s.Commit(&req, &c)
	if m := g.index.Lookup(req.prompt.chain); m.Blocks != len(req.prompt.chain) || m.Latest() != u.id {
		t.Fatalf("after Commit: index %+v; want the whole chain on %s", m, u.Name)
	}
	if got := u.computed.Load(); got != uint64(req.PromptTokens) {
		t.Fatalf("after Commit: computed %d, want the prompt's %d", got, req.PromptTokens)
	}
	if got := u.PredictLoad().Backlog; got <= 0 || got > c.Prediction.Total {
		t.Fatalf("after Commit: backlog %v, want the predicted engine time, within %v", got, c.Prediction.Total)
	}
}

// TestLeastTTFTStaysHome: a request most of whose prompt an upstream is
// predicted to hold goes there while that prediction is within twice the
// soonest and within what is left of its SLO, though an idle upstream
// would compute it sooner, and the record says affinity chose it; past
// that, to the soonest. Here b holds the prompt's system prompt; a and c
// are idle, a miss there about 200 ms; each
// request in flight on b adds 100 ms. An idle upstream that is to be
// probed again (a's last probe came sooner than the prediction it
// passed over) is not probed when it is the soonest: the request stays
// home.
func TestLeastTTFTStaysHome(t *testing.T) {
	for _, tc := range []struct {
		name        string
		inFlight    int
		slo, spent  time.Duration
		reprobe     bool // a is to be probed again
		home, probe bool
		affinity    bool
	}{
		{name: "idle at home", home: true},
		{name: "home within twice the soonest", inFlight: 2, home: true, affinity: true},
		{name: "home past twice the soonest", inFlight: 5},
		{name: "home within the SLO", inFlight: 3, slo: 400 * time.Millisecond, home: true, affinity: true},
		{name: "home past the SLO", inFlight: 3, slo: 250 * time.Millisecond},
		{name: "home past what is left of the SLO", inFlight: 2, slo: 300 * time.Millisecond, spent: 150 * time.Millisecond},
		{name: "the soonest to be probed again", inFlight: 2, reprobe: true, home: true, affinity: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, s, r := alikePool(t)
			ups := r.Pool.Upstreams
			var p fastjson.Parser
			system := systemPrompt(3, 1500)
			served(t, g, s, &p, system, ups[1])
			for range tc.inFlight {
				if _, rej := ups[1].Acquire(nil); rej != nil {
					t.Fatal(rej)
				}
			}
			ups[0].reprobe.Store(tc.reprobe)
			req := chatRequest(t, s, &p, system, "Second?")
			req.SLO, req.Spent = tc.slo, tc.spent
			c := choose(t, s, &req)
			req.Release()
			if home := c.Upstream == ups[1]; home != tc.home || c.Probe != tc.probe || c.Affinity != tc.affinity || !c.Predicted {
				t.Fatalf("%s (predicted %v, %v, %d expected cached, probe %v, affinity %v); want home %v, probe %v, affinity %v",
					c.Upstream.Name, c.Predicted, c.Prediction.Total, c.Expected.Cached, c.Probe, c.Affinity, tc.home, tc.probe, tc.affinity)
			}
		})
	}
}

// TestLeastTTFTOpeningIsNoHome: an upstream that holds only the opening
// block of a prompt (64 bytes many prompts may share) is no home for it: a
// request it would cost a little more is not kept there, but placed as a
// new prompt (here where rendezvous hashing prefers: not b).
func TestLeastTTFTOpeningIsNoHome(t *testing.T) {
	g, s, r := alikePool(t)
	ups := r.Pool.Upstreams
	var p fastjson.Parser
	var system string
	for i := 0; system == ""; i++ { // a prompt whose place is not b
		req := chatRequest(t, s, &p, systemPrompt(i, 1500), "First?")
		if hashHome(&req, ups) != ups[1] {
			system = systemPrompt(i, 1500)
			g.index.Record(req.prompt.chain[:1], ups[1].id, ups[1].computed.Load())
		}
		req.Release()
	}
	if _, rej := ups[1].Acquire(nil); rej != nil {
		t.Fatal(rej)
	}
	req := chatRequest(t, s, &p, system, "Second?")
	c := choose(t, s, &req)
	req.Release()
	if c.Upstream == ups[1] {
		t.Fatalf("kept on %s, which holds only its opening (%d tokens expected cached)", c.Upstream.Name, c.Expected.Cached)
	}
}

// TestLeastTTFTAhead: a request committed to an upstream, without its
// first token yet, holds the requests routed there after it: their load's
// Ahead is what is left of its predicted TTFT, their queue is predicted at
// least that, and once it is past its prediction, as long again as it has
// taken; once it has its first token (Prefilled), or ended (Observe),
// nothing. A request not streamed is not tracked: its first token is seen
// only at its end.
func TestLeastTTFTAhead(t *testing.T) {
	_, s, r, clk := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	engine{perToken: 100 * time.Microsecond}.teach(u, clk.Now())
	ask := func() Choice {
		t.Helper()
		c, rej := s.Choose(ttftRequest(r, 1000), nil)
		if rej != nil || !c.Predicted {
			t.Fatalf("%+v, %v: want a prediction", c, rej)
		}
		return c
	}
	whole := ask() // not streamed: its first token is seen only at its end, so it is not tracked
	s.Commit(ttftRequest(r, 1000), &whole)
	if c := ask(); c.Load.Ahead != 0 {
		t.Fatalf("behind a request not streamed: ahead %v; want 0", c.Load.Ahead)
	}
	first := ask()
	s.Commit(streamRequest(r, 1000), &first)
	total := first.Prediction.Total
	clk.Advance(total / 4)
	if c := ask(); c.Load.Ahead != total-total/4 || c.Prediction.Parts[predict.Queue] < c.Load.Ahead {
		t.Fatalf("a quarter of the first's %v later: ahead %v, queue %v; want %v, the queue at least that", total, c.Load.Ahead, c.Prediction.Parts[predict.Queue], total-total/4)
	}
	clk.Advance(total) // past its prediction: 1.25 of it taken
	if c := ask(); c.Load.Ahead != total+total/4 {
		t.Fatalf("past its prediction: ahead %v; want %v, as long again as it has taken", c.Load.Ahead, total+total/4)
	}
	first.Prefilled()
	if c := ask(); c.Load.Ahead != 0 {
		t.Fatalf("after its first token: ahead %v; want 0", c.Load.Ahead)
	}
	second := ask()
	s.Commit(streamRequest(r, 1000), &second)
	u.Observe(&second, engine{perToken: 100 * time.Microsecond}.observation(clk.Now(), 1000, 0, 0))
	if c := ask(); c.Load.Ahead != 0 {
		t.Fatalf("after a request ended: ahead %v; want 0", c.Load.Ahead)
	}
}

// TestLeastTTFTAheadRanks: the wait for the requests ahead in their
// prefill ranks the upstreams, for a request with an SLO or without: the
// sooner upstream, held by a request in its prefill, is passed over for
// the other, and a prediction there carries the wait.
func TestLeastTTFTAheadRanks(t *testing.T) {
	_, s, r, clk := ttftPool(t, 2, 0)
	ups := r.Pool.Upstreams
	engine{perToken: 100 * time.Microsecond}.teachBut(ups, clk.Now(), 1, 150*time.Microsecond) // A the sooner
	a := ups[0]
	held, rej := s.Choose(ttftRequest(r, 1000), nil)
	if rej != nil || held.Upstream != a {
		t.Fatalf("%+v, %v: want %s, the sooner", held, rej, a.Name)
	}
	s.Commit(streamRequest(r, 1000), &held) // in its prefill on A from now on
	for _, slo := range []time.Duration{0, time.Hour} {
		req := ttftRequest(r, 1000)
		req.SLO = slo
		c, rej := s.Choose(req, nil)
		if rej != nil || c.Upstream != ups[1] {
			t.Errorf("SLO %v: %s (%v); want %s, A held by a prefill", slo, c.Upstream.Name, rej, ups[1].Name)
		}
	}
	held.Prefilled()
	if c, _ := s.Choose(ttftRequest(r, 1000), nil); c.Upstream != a {
		t.Errorf("after its first token: %s; want %s again", c.Upstream.Name, a.Name)
	}
}
