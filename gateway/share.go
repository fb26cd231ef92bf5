package gateway

import (
	"time"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/quota"
	"github.com/ttftlens/ttftlens/gateway/share"
)

// newSharer returns the Sharer cfg asks for when the one in use (if any)
// is not it: not started, its Redis not yet reached; nil when cfg shares
// nothing or the one in use stays. g.mu is held.
func (g *Gateway) newSharer(cfg *Config) (*share.Sharer, error) {
	if cfg.ShareRouting != QuotaRedis || g.sharer != nil && g.shareChannel == cfg.ShareChannel {
		return nil, nil
	}
	var t share.Transport
	if g.opts.ShareTransport != nil {
		t = g.opts.ShareTransport()
	} else {
		c, err := redisConn(cfg.QuotaBackend.Redis)
		if err != nil {
			return nil, err
		}
		t = share.NewRedis(quota.ClientOptions(c), cfg.ShareChannel)
	}
	return share.New(t, g.shareID, applier{g}, g.log, g.opts.Clock), nil
}

// setSharer puts sh (newSharer's) in use, stopping the one it replaces,
// or stops the one in use when cfg shares nothing. g.mu is held.
func (g *Gateway) setSharer(cfg *Config, sh *share.Sharer) {
	if sh == nil && (cfg.ShareRouting == QuotaRedis) == (g.sharer != nil) {
		return
	}
	g.stopSharer()
	g.sharer, g.shareChannel = sh, cfg.ShareChannel
	g.share.Store(sh)
	if sh != nil && g.running {
		sh.Start()
	}
}

// stopSharer stops the sharer in use, if any, and forgets what the other
// replicas said they had in flight: nothing will update it now. g.mu is
// held.
func (g *Gateway) stopSharer() {
	if g.sharer == nil {
		return
	}
	g.sharer.Stop() // its goroutines are done with the upstreams once it returns
	g.sharer = nil
	g.share.Store(nil)
	for _, u := range g.ups {
		u.clearRemote()
	}
}

// publish shares c's commit of a request of tokens computed and work on
// its upstream, its prompt pr, when the routing is shared; the upstream's
// outstanding count it publishes counts the request (Acquire, after
// Commit, will).
func (g *Gateway) publish(c *Choice, pr *prompt, computed uint64, work time.Duration) {
	sh := g.share.Load()
	if sh == nil {
		return
	}
	u := c.Upstream
	m := share.Commit{Upstream: u.URL, Computed: computed, Work: work, InFlight: uint64(max(u.outstanding.Load()+1, 0))}
	if pr != nil {
		m.Chain = pr.chain
	}
	sh.Publish(&m)
}

// publishCount shares u's count of outstanding requests, n, and tokens
// computed there that no commit counted (a prefix predicted cached that the
// engine computed), when the routing is shared: at a request's end, every
// beat (Tick), and with such tokens.
func (g *Gateway) publishCount(u *Upstream, n int64, computed uint64) {
	if sh := g.share.Load(); sh != nil {
		sh.Publish(&share.Commit{Upstream: u.URL, InFlight: uint64(max(n, 0)), Computed: computed})
	}
}

// remoteLoad is one other replica's requests on an upstream, as it last
// published them, and when.
type remoteLoad struct {
	n  int64
	at int64 // the gateway's clock
}

// remoteTTL is how long another replica's count stands without a word
// from it about the upstream. Each replica publishes its counts every
// share.TickEvery (Tick), so a count is forgotten after three missed
// beats: the replica stopped, or lost Redis.
const remoteTTL = 3 * share.TickEvery

// setRemote takes another replica's count of its requests on u, published
// at now, and sums the counts still fresh into u.remoteInFlight.
func (u *Upstream) setRemote(from uint64, n int64, now int64) {
	u.remoteMu.Lock()
	defer u.remoteMu.Unlock()
	if u.remote == nil {
		u.remote = map[uint64]remoteLoad{}
	}
	u.remote[from] = remoteLoad{n: n, at: now}
	u.sumRemote(now)
}

// sumRemote forgets the counts older than remoteTTL at now and sums the
// rest into u.remoteInFlight. u.remoteMu is held.
func (u *Upstream) sumRemote(now int64) {
	var sum int64
	for r, l := range u.remote {
		if now-l.at > int64(remoteTTL) {
			delete(u.remote, r)
			continue
		}
		sum += l.n
	}
	u.remoteInFlight.Store(sum)
}

// clearRemote forgets every other replica's count on u.
func (u *Upstream) clearRemote() {
	u.remoteMu.Lock()
	clear(u.remote)
	u.remoteInFlight.Store(0)
	u.remoteMu.Unlock()
}

// applier applies the other replicas' messages to its gateway.
type applier struct{ g *Gateway }

// sharedUpstream is the upstream of url in a least_ttft pool of the
// current configuration, nil (counted) when there is none.
func (g *Gateway) sharedUpstream(url string) (*Upstream, *Pool) {
	for _, p := range g.Snapshot().pools {
		if p.kind != policyLeastTTFT {
			continue
		}
		for _, u := range p.Upstreams {
			if u.URL == url {
				return u, p
			}
		}
	}
	g.shareUnknown.Add(1)
	return nil, nil
}

// ApplyCommit applies another replica's commit as Commit applies this
// one's: the upstream of that URL in a least_ttft pool takes its tokens
// into its count of tokens computed and its engine time into its backlog,
// and the prefix index records it as the latest to serve the chain; and
// the replica's count of its requests there (a request's end publishes it
// too) into the upstream's load. A commit for an upstream no least_ttft
// pool here has is counted, not applied.
func (a applier) ApplyCommit(c *share.Commit) {
	u, p := a.g.sharedUpstream(c.Upstream)
	if u == nil {
		return
	}
	now := a.g.now()
	u.setRemote(c.From, int64(min(c.InFlight, 1<<32)), now)
	mark := u.computed.Add(c.Computed)
	if c.Work > 0 {
		u.addBacklog(now, c.Work)
	}
	if len(c.Chain) > 0 {
		p.index.Record(c.Chain, u.id, mark)
	}
}

// Tick, every share.TickEvery: the other replicas' counts not heard of
// within remoteTTL are forgotten, and this replica's own are published
// again, so that a count a lost message left wrong is right within a
// beat, and a replica that stops is forgotten.
func (a applier) Tick() {
	now := a.g.now()
	for _, p := range a.g.Snapshot().pools {
		if p.kind != policyLeastTTFT {
			continue
		}
		for _, u := range p.Upstreams {
			u.remoteMu.Lock()
			u.sumRemote(now)
			u.remoteMu.Unlock()
			a.g.publishCount(u, u.outstanding.Load(), 0)
		}
	}
}

// ApplyObserved teaches the upstream's model another replica's finished
// request, as ended now: every replica's model of an upstream learns from
// all the requests on it.
func (a applier) ApplyObserved(o *share.Observed) {
	if u, _ := a.g.sharedUpstream(o.Upstream); u != nil {
		o.Observation.End = a.g.Now()
		u.model.Observe(o.Observation)
	}
}

// publishObserved shares what a finished request on u taught its model,
// when the routing is shared.
func (g *Gateway) publishObserved(u *Upstream, o *predict.Observation) {
	if sh := g.share.Load(); sh != nil {
		sh.PublishObserved(&share.Observed{Upstream: u.URL, Observation: *o})
	}
}
