package gateway

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/share"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// sharedPair is two replicas' gateways of a least_ttft pool of two
// upstreams sharing their routing on one hub (share_routing), started.
func sharedPair(t *testing.T) (a, b *Gateway) {
	t.Helper()
	hub := &share.Hub{}
	mk := func() *Gateway {
		cfg := ttftConfig(2, 0)
		cfg.ShareRouting = QuotaRedis
		cfg.QuotaBackend = QuotaBackend{Kind: QuotaRedis, Redis: RedisConfig{Address: "127.0.0.1:1"}}
		g, _ := newGateway(t, cfg, Options{ShareTransport: hub.Transport})
		g.Start()
		return g
	}
	return mk(), mk()
}

// received waits until g has applied n of the other replicas' messages.
func received(g *Gateway, n uint64) {
	for g.share.Load().Stats().Received < n {
		runtime.Gosched()
	}
}

// TestShareRouting: what replica A routes, replica B knows once it is
// shared: the prompt's prefix recorded on the upstream A sent it to (the
// same upstream in B's config, by URL), the tokens A sent it to compute,
// its predicted engine time in B's backlog, and the request in B's count
// of the upstream's requests until A says it ended; and B's models learn
// what A's requests taught A's. Each counts what it sent and received.
func TestShareRouting(t *testing.T) {
	a, b := sharedPair(t)
	sa, sb := a.Snapshot(), b.Snapshot()
	ua := sa.Pools()[0].Upstreams
	engine{perToken: 100 * time.Microsecond}.teach(ua[0], 0)
	engine{perToken: time.Millisecond}.teach(ua[1], 0) // A's model: the first is faster
	// B's models learned what A's did: 80 observations, shared.
	received(b, 80)
	ub0, ub1 := sb.Pools()[0].Upstreams[0], sb.Pools()[0].Upstreams[1]
	p0, ok0 := ub0.model.Predict(0, 1500, predict.Expected{}, predict.Load{})
	p1, ok1 := ub1.model.Predict(0, 1500, predict.Expected{}, predict.Load{})
	if !ok0 || !ok1 || p0.Parts[predict.Prefill] >= p1.Parts[predict.Prefill] {
		t.Fatalf("B's models from A's observations: %v %v, %v %v; want the first's prefill shorter", p0.Parts, ok0, p1.Parts, ok1)
	}

	var p fastjson.Parser
	req := chatRequest(t, sa, &p, systemPrompt(3, 1500), "?")
	defer req.Release()
	c := choose(t, sa, &req)
	if c.Upstream != ua[0] || !c.Predicted {
		t.Fatalf("A chose %s (predicted %v), want the faster", c.Upstream.Name, c.Predicted)
	}
	received(b, 81)

	ub := ub0 // B's Upstream of the same URL
	if m := b.index.Lookup(req.prompt.chain); m.Blocks != len(req.prompt.chain) || m.Latest() != ub.id {
		t.Fatalf("B's index: %+v; want the whole chain on %s", m, ub.Name)
	}
	if got := ub.computed.Load(); got != uint64(req.PromptTokens) {
		t.Fatalf("B's count of tokens sent %s: %d, want A's request's %d", ub.Name, got, req.PromptTokens)
	}
	if got := ub.PredictLoad().Backlog; got != c.Prediction.Work() {
		t.Fatalf("B's backlog on %s: %v, want A's predicted engine time %v", ub.Name, got, c.Prediction.Work())
	}
	if got := sb.Pools()[0].Upstreams[1].computed.Load(); got != 0 {
		t.Fatalf("the other upstream took %d tokens in B", got)
	}
	// B counts A's request on the upstream in its load, until A says it
	// ended.
	if got := ub.PredictLoad().InFlight; got != 1 {
		t.Fatalf("B's in flight on %s: %d, want A's request", ub.Name, got)
	}
	release, rej := c.Upstream.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	release()
	received(b, 82)
	if got := ub.PredictLoad().InFlight; got != 0 {
		t.Fatalf("B's in flight on %s after A's request ended: %d", ub.Name, got)
	}
	// A applied nothing of its own: its counts are its Commit's alone.
	if got := ua[0].computed.Load(); got != uint64(req.PromptTokens) {
		t.Fatalf("A's own count: %d, want %d (its own commit, once)", got, req.PromptTokens)
	}

	label := func(u *Upstream) string { return u.Name }
	for _, tt := range []struct {
		g              *Gateway
		sent, received uint64
	}{{a, 82, 0}, {b, 0, 82}} {
		for tt.g.share.Load().Stats().Sent < tt.sent { // counted once its Publish returned
			runtime.Gosched()
		}
		want := fmt.Sprintf(`
# HELP ttftlens_routing_share_messages_total share_routing's messages by event: sent (this replica's messages published: routings, ends, observations, counts every 10 s), received (the other replicas' taken, unknown_upstream ones too), dropped (not published: the queue was full, or sharing stopped), failed (the messages of a publish to Redis that failed, some of which may have gone, and receives that failed), malformed (received, unreadable), unknown_upstream (received for an upstream no least_ttft pool here has).
# TYPE ttftlens_routing_share_messages_total counter
ttftlens_routing_share_messages_total{event="dropped"} 0
ttftlens_routing_share_messages_total{event="failed"} 0
ttftlens_routing_share_messages_total{event="malformed"} 0
ttftlens_routing_share_messages_total{event="received"} %d
ttftlens_routing_share_messages_total{event="sent"} %d
ttftlens_routing_share_messages_total{event="unknown_upstream"} 0
`, tt.received, tt.sent)
		if err := testutil.CollectAndCompare(NewCollector(tt.g, label), strings.NewReader(want), "ttftlens_routing_share_messages_total"); err != nil {
			t.Error(err)
		}
	}
}

// TestShareUnknownUpstream: a commit for an upstream this replica does not
// have (its config differs) is counted, not applied.
func TestShareUnknownUpstream(t *testing.T) {
	_, b := sharedPair(t)
	applier{b}.ApplyCommit(&share.Commit{Upstream: "http://elsewhere:8000", Computed: 10, Chain: []uint64{1}})
	if got := b.shareUnknown.Load(); got != 1 {
		t.Fatalf("unknown upstream counted %d, want 1", got)
	}
	for _, u := range b.Snapshot().Pools()[0].Upstreams {
		if u.computed.Load() != 0 {
			t.Fatalf("%s took the commit", u.Name)
		}
	}
}

// TestShareRoutingConfig: share_routing needs the quota backend's Redis;
// a reload turns it on and off; a gateway stopped and started again shares
// on a new connection.
func TestShareRoutingConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*Config)
		err  string
	}{
		{"no redis backend", func(c *Config) { c.ShareRouting = QuotaRedis }, "share_routing: redis shares routing through the quota backend's Redis"},
		{"another kind", func(c *Config) { c.ShareRouting = "etcd" }, `share_routing: must be redis or empty, not "etcd"`},
		{"a channel alone", func(c *Config) { c.ShareChannel = "x" }, "share_channel: given but share_routing is not set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ttftConfig(2, 0)
			tt.set(cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one saying %q", err, tt.err)
			}
		})
	}

	hub := &share.Hub{}
	cfg := ttftConfig(2, 0)
	g, _ := newGateway(t, cfg, Options{ShareTransport: hub.Transport})
	g.Start()
	if g.share.Load() != nil {
		t.Fatal("sharing without share_routing")
	}
	on := ttftConfig(2, 0)
	on.ShareRouting, on.QuotaBackend = QuotaRedis, QuotaBackend{Kind: QuotaRedis, Redis: RedisConfig{Address: "127.0.0.1:1"}}
	if err := g.Reload(on); err != nil {
		t.Fatal(err)
	}
	first := g.share.Load()
	if first == nil || on.ShareChannel != DefaultShareChannel {
		t.Fatalf("after a reload with share_routing: sharer %v, channel %q", first, on.ShareChannel)
	}
	same := ttftConfig(2, 0)
	same.ShareRouting, same.QuotaBackend = QuotaRedis, on.QuotaBackend
	if err := g.Reload(same); err != nil || g.share.Load() != first {
		t.Fatalf("a reload of the same: %v; the sharer kept: %v", err, g.share.Load() == first)
	}
	g.Stop()
	if g.share.Load() != nil {
		t.Fatal("a stopped gateway still shares")
	}
	g.Start()
	if sh := g.share.Load(); sh == nil || sh == first {
		t.Fatalf("restarted: sharer %v, want a new one", sh)
	}
	if err := g.Reload(ttftConfig(2, 0)); err != nil || g.share.Load() != nil {
		t.Fatalf("a reload without share_routing: %v; sharer %v", err, g.share.Load())
	}
}

// TestRemoteInFlight: each replica's last count stands until it is
// replaced or remoteTTL passes without a word from that replica; the
// upstream's remote load is their sum.
func TestRemoteInFlight(t *testing.T) {
	_, _, r, _ := ttftPool(t, 1, 0)
	u := r.Pool.Upstreams[0]
	u.setRemote(1, 3, 0)
	u.setRemote(2, 2, int64(time.Second))
	if got := u.remoteInFlight.Load(); got != 5 {
		t.Fatalf("two replicas' 3 and 2: %d", got)
	}
	u.setRemote(1, 1, int64(2*time.Second))
	if got := u.remoteInFlight.Load(); got != 3 {
		t.Fatalf("the first's count replaced by 1: %d, want 3", got)
	}
	u.setRemote(1, 0, int64(time.Second+remoteTTL+1))
	if got := u.remoteInFlight.Load(); got != 0 || len(u.remote) != 1 {
		t.Fatalf("the second silent past remoteTTL: %d over %d replicas, want 0 over 1", got, len(u.remote))
	}
}

// TestShareTick: on each beat a replica forgets the counts of replicas it
// has not heard from within remoteTTL, with no message needed to prompt
// it, and publishes its own counts again: a count a lost message left
// wrong is put right at the next beat.
func TestShareTick(t *testing.T) {
	a, b := sharedPair(t)
	ub := b.Snapshot().Pools()[0].Upstreams[0]
	ub.setRemote(99, 4, 0) // a replica that stopped
	clk := b.opts.Clock.(*clock.Fake)
	clk.Advance(remoteTTL + time.Second)
	applier{b}.Tick()
	if got := ub.remoteInFlight.Load(); got != 0 {
		t.Fatalf("a count not heard of for %v still counts %d", remoteTTL+time.Second, got)
	}

	ua := a.Snapshot().Pools()[0].Upstreams[0]
	release, rej := ua.Acquire(nil) // A's request, its commit's message lost
	if rej != nil {
		t.Fatal(rej)
	}
	defer release()
	applier{a}.Tick()
	received(b, 2) // A's two upstreams' counts
	if got := ub.remoteInFlight.Load(); got != 1 {
		t.Fatalf("after A's beat, B counts %d of A's requests, want 1", got)
	}
}

// TestShareOffForgets: when the routing stops being shared, what the
// other replicas said they had in flight stops counting (nothing would
// update it), and a replica restarted publishes under the same id, so
// its new counts replace its old ones.
func TestShareOffForgets(t *testing.T) {
	a, b := sharedPair(t)
	ua := a.Snapshot().Pools()[0].Upstreams[0]
	ub := b.Snapshot().Pools()[0].Upstreams[0]
	release, rej := ua.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	a.publishCount(ua, 1, 0)
	received(b, 1)
	a.Stop()
	a.Start()
	a.publishCount(ua, 1, 0) // the same request, counted again by A's new sharer
	received(b, 2)
	if got := ub.remoteInFlight.Load(); got != 1 {
		t.Fatalf("A restarted: B counts %d, want A's one request once", got)
	}
	release()
	b.Stop()
	if got := ub.PredictLoad().InFlight; got != 0 {
		t.Fatalf("B no longer sharing still counts %d of A's", got)
	}
}

// TestShareWastedPrefix: a prefix A's choice counted as cached that the
// engine computed is counted into the tokens computed there at B too, so
// that the prefixes' distances stay alike in every replica.
func TestShareWastedPrefix(t *testing.T) {
	a, b := sharedPair(t)
	ua := a.Snapshot().Pools()[0].Upstreams[0]
	ub := b.Snapshot().Pools()[0].Upstreams[0]
	c := &Choice{Upstream: ua, Predicted: true, Expected: predict.Expected{Cached: 500}}
	o := engine{perToken: time.Millisecond}.observation(0, 600, 0, 0) // the engine cached none of it
	ua.Observe(c, o)
	received(b, 2) // the observation, and the count
	if got := ub.computed.Load(); got != 500 {
		t.Fatalf("B counts %d tokens computed on %s, want the 500 A's choice expected cached", got, ub.Name)
	}
}
