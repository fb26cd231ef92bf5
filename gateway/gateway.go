// Package gateway is ttftlens' gateway logic: API keys, per-key quotas,
// request validation, routing models to pools of upstreams with health
// checks and passive ejection, a FIFO admission queue per upstream, and
// per-route deadlines, all from one YAML config that reloads
// atomically.
//
// It does no I/O on the request path and keeps no clock of its own: the
// proxy calls each step between the marks of its request clock and answers
// a *Rejection itself. For one request, in order:
//
//	s := g.Snapshot()                          // the config this request keeps
//	key, rej := s.Authenticate(authHeader)     // → gateway stage
//	req, rej := s.CheckRequest(parser, gateway.Chat, body)
//	res, rej := s.Admit(key, req.Reserve())
//	dl, rej := req.Route.Deadlines(flagDefaults, totalHdr, ttftHdr)
//	slo, rej := req.Route.SLO(sloHdr)          // mark gateway_done; req.SLO = slo
//	c, rej := s.Choose(&req, nil)              // up := c.Upstream
//	                                           // (or s.Pick(req.Route, nil): the upstream alone)
//	rej := RefuseSLO(&c, slo, elapsed)         // or Choose on req.Route.Fallback
//	s.Commit(&req, &c)                         // mark routed
//	release, rej := up.Acquire(clientGone)     // mark admitted
//	... the upstream exchange; after a failed connect (nothing reached the
//	    engine), once: g.Done(up, false); release(); c.Prefilled();
//	    c2, rej := s.Choose(&req, up); s.Commit(&req, &c2); release2, rej := c2.Upstream.Acquire(...)
//	req.Release()                              // after the last Choose and Commit
//	c.Prefilled()                              // at the first token parsed (least_ttft)
//	g.Done(up, ok); release(); res.Settle(actualTokens)
//	up.Observe(&c, ...)                        // the record's split, for least_ttft
//	c.Prefilled()                              // at the end too, for one without a first token
//
// After Admit succeeded, a later gateway Rejection (Pick, Acquire) should
// res.Cancel() so the key does not pay for a request it never got.
package gateway

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway/prefix"
	"github.com/ttftlens/ttftlens/gateway/quota"
	"github.com/ttftlens/ttftlens/gateway/share"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// Options are the gateway's injected dependencies; the zero value is the
// production setup.
type Options struct {
	// Probe performs active health checks (default HTTPProbe, no
	// keep-alives).
	Probe ProbeFunc
	// Clock is the gateway's time: quotas, ejections, health probes'
	// intervals and backoff, admission queue timeouts (default
	// clock.Real). Tests pass a *clock.Fake.
	Clock clock.Clock
	// Log receives the gateway's operational messages: one line each time
	// an upstream goes out of rotation (a failed health check, passive
	// ejection) or comes back. Nil: JSON lines with a timestamp on stderr,
	// as `ttftlens serve` writes its own.
	Log *zerolog.Logger
	// ShareTransport, when set, makes the transport of share_routing in
	// place of the quota backend's Redis (tests; replicas in one process).
	ShareTransport func() share.Transport
}

// Gateway holds the current configuration and the state that outlives a
// reload: upstreams (their queues, load and health) by URL, and quota
// buckets by key name. Its methods are safe for concurrent use.
type Gateway struct {
	opts  Options
	log   zerolog.Logger
	start time.Time // the wall time of the clock's origin
	cur   atomic.Pointer[Snapshot]
	// waiters are the admission queues' waiters, pooled with their timers
	// on opts.Clock (admission.go).
	waiters sync.Pool

	mu      sync.Mutex // serializes Reload, Start and Stop
	running bool
	ups     map[string]*Upstream     // by base URL as written
	buckets map[string]*quota.Bucket // by key name
	watches []func(*Snapshot)
	// probeWatches are told of upstreams whose health probe passed
	// (WatchProbes); appended under mu, read by the probing goroutines.
	probeWatches atomic.Pointer[[]func(*Upstream)]
	// redis is made by the first config with the redis quota backend, on
	// redisConn.
	redis     *quota.Redis
	redisConn RedisConfig
	// lastID is the last Upstream id given out (under mu): ids are never
	// reused, so the prefix index never takes a new upstream for an old one.
	lastID uint32
	// index is the prefix index of the least_ttft pools, nil while no pool
	// uses it; kept across reloads while its capacity (indexEntries, as
	// configured) stays.
	index        *prefix.Index
	indexEntries int
	// sharer shares the least_ttft pools' routing with the other
	// replicas (share_routing), on shareChannel; nil while the config does
	// not. share is it for requests (Commit), read without mu.
	sharer       *share.Sharer
	shareChannel string
	share        atomic.Pointer[share.Sharer]
	// shareID is this replica's in its messages: one for the gateway's
	// life, so that a new Sharer (a reload, a restart) replaces its
	// counts at the other replicas rather than adding to them.
	shareID uint64
	// shareUnknown counts shared commits for an upstream this replica's
	// least_ttft pools do not have (its config differs).
	shareUnknown atomic.Uint64
}

// Snapshot is one configuration in effect: everything a request needs from
// the gateway. A request takes one Snapshot and uses it throughout, so a
// reload never changes the rules under a request. Safe for concurrent use.
type Snapshot struct {
	g      *Gateway
	cfg    *Config
	auth   string
	keys   map[[32]byte]*Key
	exact  map[string]*Route
	globs  []*Route
	routes []*Route
	pools  []*Pool
	// unchecked are the upstreams of pools without health checks: Reload
	// marks them healthy once the old checkers have stopped, so a probe of
	// theirs still finishing cannot undo it.
	unchecked []*Upstream
}

// New validates cfg, fills its defaults (cfg is modified; do not modify it
// afterwards) and builds a gateway. Start begins the health checks.
func New(cfg *Config, opts Options) (*Gateway, error) {
	if opts.Probe == nil {
		opts.Probe = defaultProbe()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	g := &Gateway{opts: opts, start: time.Now().Add(-opts.Clock.Now()), ups: map[string]*Upstream{}, buckets: map[string]*quota.Bucket{},
		shareID: share.NewID()}
	g.waiters.New = g.newWaiter
	if opts.Log != nil {
		g.log = *opts.Log
	} else {
		g.log = zerolog.New(os.Stderr).With().Timestamp().Logger()
	}
	if err := g.Reload(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gateway) now() int64 { return int64(g.opts.Clock.Now()) }

// Now reads the gateway's clock (Options.Clock): an Observation's End.
func (g *Gateway) Now() time.Duration { return g.opts.Clock.Now() }

// Snapshot returns the configuration in effect. Take it once per request.
func (g *Gateway) Snapshot() *Snapshot { return g.cur.Load() }

// Config returns the snapshot's configuration (read-only).
func (s *Snapshot) Config() *Config { return s.cfg }

// Pools returns the snapshot's pools in configured order (read-only): the
// metrics owner reads each Upstream's QueueDepth and InFlight from here.
func (s *Snapshot) Pools() []*Pool { return s.pools }

// Routes returns the snapshot's routes in configured order (read-only).
func (s *Snapshot) Routes() []*Route { return s.routes }

// Authenticate is Snapshot().Authenticate, for a caller that needs only this.
func (g *Gateway) Authenticate(authorization []byte) (*Key, *Rejection) {
	return g.Snapshot().Authenticate(authorization)
}

// Reload validates cfg, fills its defaults and makes it the configuration
// for requests that start from now on. Requests in flight keep their
// Snapshot. Upstreams that stay (same URL) keep their in-flight requests,
// queue, load and health; removed ones live on until their last release.
// Keys that stay (same name) keep their quota levels. Health checks restart
// on the new pools when the gateway is running. The redis quota backend's
// connection (address, credentials, database, TLS) cannot change: that
// takes a restart. On error nothing changes.
func (g *Gateway) Reload(cfg *Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Normalize()
	g.mu.Lock()
	defer g.mu.Unlock()
	sh, err := g.newSharer(cfg)
	if err != nil {
		return err
	}
	s, err := g.build(cfg)
	if err != nil {
		if sh != nil {
			sh.Stop()
		}
		return err
	}
	g.setSharer(cfg, sh)
	if g.running && g.redis != nil {
		g.redis.Start() // when this config made it
	}
	old := g.cur.Swap(s)
	if g.running && old != nil {
		stopCheckers(old)
	}
	for _, u := range s.unchecked {
		u.checksRemoved() // no checks: no verdict to keep
	}
	if g.running {
		g.startCheckers(s)
	}
	for _, f := range g.watches {
		f(s)
	}
	return nil
}

// Watch calls f with the snapshot in effect now, and then with each one a
// Reload puts in effect, before Reload returns (the proxy starts scraping
// the engines of least_load pools this way). f runs under the reload lock:
// it must not call Reload, Start, Stop or Watch.
func (g *Gateway) Watch(f func(*Snapshot)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watches = append(g.watches, f)
	f(g.cur.Load())
}

// WatchProbes calls f, from the probing goroutine, each time an upstream's
// active health check passes for the first time, or for the first time
// after a failure: the engine behind it is up (the proxy identifies it
// then). f must not block.
func (g *Gateway) WatchProbes(f func(*Upstream)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var fs []func(*Upstream)
	if p := g.probeWatches.Load(); p != nil {
		fs = append(fs, *p...)
	}
	fs = append(fs, f)
	g.probeWatches.Store(&fs)
}

// probePassed tells the probe watchers that u's probe passed.
func (g *Gateway) probePassed(u *Upstream) {
	if p := g.probeWatches.Load(); p != nil {
		for _, f := range *p {
			f(u)
		}
	}
}

// Start begins the active health checks and, with the redis quota backend,
// the settler that sends quota settlements. Stop ends them.
func (g *Gateway) Start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		return
	}
	g.running = true
	g.startCheckers(g.cur.Load())
	if g.redis != nil {
		g.redis.Start()
	}
	switch cfg := g.cur.Load().cfg; {
	case g.sharer != nil:
		g.sharer.Start()
	case cfg.ShareRouting != "":
		// Stop dropped the last one: a new one, started by setSharer (its
		// connection resolved when the config was loaded).
		if sh, err := g.newSharer(cfg); err == nil {
			g.setSharer(cfg, sh)
		} else {
			g.log.Error().Err(err).Msg("share_routing: routing not shared")
		}
	}
}

// Stop ends the active health checks and waits for their goroutines, sends
// the quota settlements still queued and closes the connection to Redis.
// Requests may still use the gateway (upstreams keep their last verdict;
// the redis quota backend counts as unavailable).
func (g *Gateway) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return
	}
	g.running = false
	stopCheckers(g.cur.Load())
	if g.redis != nil {
		g.redis.Stop()
	}
	g.stopSharer() // a stopped Sharer is not started again: Start makes another
}

func (g *Gateway) startCheckers(s *Snapshot) {
	for _, p := range s.pools {
		if p.health.Path != "" {
			p.checker = g.startChecker(p)
		}
	}
}

func stopCheckers(s *Snapshot) {
	for _, p := range s.pools {
		if p.checker != nil {
			p.checker.stop()
			p.checker = nil
		}
	}
}

// build makes a Snapshot of a validated, normalized cfg. g.mu is held.
func (g *Gateway) build(cfg *Config) (*Snapshot, error) {
	s := &Snapshot{
		g: g, cfg: cfg, auth: cfg.Auth,
		keys:  make(map[[32]byte]*Key, len(cfg.Keys)),
		exact: make(map[string]*Route, len(cfg.Routes)),
	}
	// Resolve every key before changing any shared state: the environment
	// may have changed since Validate.
	hashes := make([][32]byte, len(cfg.Keys))
	for i := range cfg.Keys {
		h, err := resolveKey(cfg.Keys[i].Key)
		if err != nil {
			return nil, fmt.Errorf("keys[%d].key: %w", i, err)
		}
		hashes[i] = h
	}
	store, err := g.quotaStore(&cfg.QuotaBackend)
	if err != nil {
		return nil, err
	}
	policy := cfg.QuotaBackend.Redis.policy()
	buckets := make(map[string]*quota.Bucket, len(cfg.Keys))
	for i := range cfg.Keys {
		kc, h := &cfg.Keys[i], hashes[i]
		k := &Key{Name: kc.Name, AllowBreakdown: cfg.KeyDefaults.AllowBreakdown, hash: h}
		if kc.AllowBreakdown != nil {
			k.AllowBreakdown = *kc.AllowBreakdown
		}
		q := cfg.KeyDefaults.Quota
		if kc.Quota != nil {
			q = *kc.Quota
		}
		if !q.unlimited() {
			l := quota.Limit(q)
			b := g.buckets[kc.Name]
			if b == nil {
				b = quota.NewBucket(l, g.now)
			} else {
				b.Configure(l)
			}
			buckets[kc.Name] = b
			k.quota = b
			if store != nil {
				k.quota = store.Key(kc.Name, l, b, policy)
			}
		}
		s.keys[h] = k
	}

	ups := make(map[string]*Upstream)
	pools := make(map[string]*Pool, len(cfg.Pools))
	index := g.prefixIndex(cfg)
	for i := range cfg.Pools {
		pc := &cfg.Pools[i]
		p := &Pool{Name: pc.Name, Policy: pc.Policy, kind: policyOf(pc.Policy), health: pc.Health, g: g}
		if p.kind == policyLeastTTFT {
			p.index = index
			p.slack = int64(max(cmp.Or(pc.LoadSlack, DefaultLoadSlack), 0))
		}
		for _, raw := range pc.Upstreams {
			uu, err := parseUpstreamURL(raw)
			if err != nil {
				panic("BUG: upstream URL passed Validate: " + err.Error())
			}
			// Reused only when written the same way: Name and URL never
			// change under a running health check or a record.
			u := g.ups[uu.base]
			if u == nil {
				u = newUpstream(g, uu)
			}
			if pc.Health.Path == "" {
				s.unchecked = append(s.unchecked, u)
			}
			u.leastTTFT.Store(p.kind == policyLeastTTFT)
			u.ejectAfter.Store(int32(min(pc.Ejection.ConsecutiveFailures, 1<<30)))
			u.ejectFor.Store(int64(pc.Ejection.Duration))
			u.q.configure(pc.MaxInFlight, pc.QueueSize, pc.QueueMaxWait)
			ups[uu.base] = u
			p.Upstreams = append(p.Upstreams, u)
		}
		pools[pc.Name] = p
		s.pools = append(s.pools, p)
	}

	for i := range cfg.Routes {
		rc := &cfg.Routes[i]
		r := &Route{
			Model: rc.Model, Pool: pools[rc.Pool], MaxTokens: rc.MaxTokens, MaxN: rc.MaxN,
			FirstTokenDeadline: rc.FirstTokenDeadline, TotalDeadline: rc.TotalDeadline,
			MaxFirstTokenDeadline: rc.MaxFirstTokenDeadline, MaxTotalDeadline: rc.MaxTotalDeadline,
			TTFTSLO: rc.TTFTSLO, glob: isGlob(rc.Model),
		}
		if f := pools[rc.TTFTSLOFallback]; f != nil {
			fb := *r
			fb.Pool, fb.Fallback = f, nil
			r.Fallback = &fb
		}
		s.routes = append(s.routes, r)
		if r.glob {
			s.globs = append(s.globs, r)
		} else {
			s.exact[r.Model] = r
		}
	}
	g.ups, g.buckets, g.index, g.indexEntries = ups, buckets, index, cfg.PrefixIndexEntries
	if store != nil && g.redis == nil {
		g.redis, g.redisConn = store, cfg.QuotaBackend.Redis.conn()
	}
	return s, nil
}

// prefixIndex is the prefix index for cfg: the one in use when its
// capacity stays, a new one when it changes, nil when no pool routes by
// least_ttft. g.mu is held.
func (g *Gateway) prefixIndex(cfg *Config) *prefix.Index {
	if !slices.ContainsFunc(cfg.Pools, func(p PoolConfig) bool { return p.Policy == PolicyLeastTTFT }) {
		return nil
	}
	if g.index != nil && g.indexEntries == cfg.PrefixIndexEntries {
		return g.index
	}
	return prefix.New(prefix.Options{Capacity: cfg.PrefixIndexEntries, Clock: g.opts.Clock})
}

func isGlob(s string) bool {
	return slices.ContainsFunc([]byte(s), func(c byte) bool { return c == '*' || c == '?' })
}

// AppendModels appends the /v1/models answer to dst: every route that names
// a model exactly (globs are not models), in configured order.
func (s *Snapshot) AppendModels(dst []byte) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	first := true
	for _, r := range s.routes {
		if r.glob {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `{"id":`...)
		dst = appendJSONString(dst, r.Model)
		dst = append(dst, `,"object":"model","created":0,"owned_by":"ttftlens"}`...)
	}
	return append(dst, "]}"...)
}
