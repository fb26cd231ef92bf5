package gateway

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// Route is a configured route: a model (or glob) and its limits. Routes are
// immutable and belong to their Snapshot.
type Route struct {
	// Model is the configured model name or glob.
	Model string
	// Pool serves the route.
	Pool *Pool
	// MaxTokens caps max_tokens (0: none); MaxN caps n.
	MaxTokens, MaxN int
	// The deadlines (0: the proxy's default) and how far a request header
	// may lengthen them (see Deadlines).
	FirstTokenDeadline, TotalDeadline       time.Duration
	MaxFirstTokenDeadline, MaxTotalDeadline time.Duration
	// TTFTSLO is the route's TTFT SLO (0: none; see SLO), and Fallback the
	// route to take when its pool cannot meet one: this route on the
	// ttft_slo_fallback pool (nil: none).
	TTFTSLO  time.Duration
	Fallback *Route
	glob     bool
}

// route finds the route of model: an exact name first, then the globs in
// file order. Neither allocates.
func (s *Snapshot) route(model []byte) *Route {
	if r := s.exact[string(model)]; r != nil {
		return r
	}
	for _, r := range s.globs {
		if globMatch(r.Model, model) {
			return r
		}
	}
	return nil
}

// globMatch reports whether name matches pattern, where '*' matches any run
// of bytes and '?' one byte. Linear backtracking on the last star.
func globMatch(pattern string, name []byte) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Pool is a group of upstreams serving the same routes. Pools belong to
// their Snapshot; the Upstreams in them outlive reloads that keep them.
type Pool struct {
	// Name is the configured name.
	Name string
	// Upstreams in configured order.
	Upstreams []*Upstream
	// Policy is how Pick chooses: one of the Policy constants.
	Policy  string
	kind    policy
	rr      atomic.Uint32
	health  HealthConfig
	checker *checker
	g       *Gateway
	index   *prefix.Index // least_ttft: the gateway's prefix index
	slack   int64         // least_ttft: PoolConfig.LoadSlack in effect
	// loadUnknown: least_load's last Pick fell back to least_request
	// because an upstream's engine load was unknown (logged on each change).
	loadUnknown atomic.Bool
}

// Upstream is one model server: its admission queue, its load and its
// health. An Upstream keeps its identity (and its in-flight requests,
// queue and health) across reloads that keep its URL; one dropped by a
// reload lives on until its last request releases it.
type Upstream struct {
	// Name labels the upstream in records and metrics: host[:port] as
	// written in the config.
	Name string
	// URL is the base URL, scheme://host[:port].
	URL string

	outstanding  atomic.Int64 // queued + in flight: the load Pick compares
	healthy      atomic.Bool  // the active health check's verdict
	nextProbe    atomic.Int64 // gateway-clock ns of the next active check
	ejectedUntil atomic.Int64 // gateway-clock ns; passive ejection
	fails        atomic.Int32 // consecutive failures reported by Done
	ejectAfter   atomic.Int32 // <= 0: never eject
	ejectFor     atomic.Int64 // ns
	q            admission
	releaseFn    func() // u.release, bound once so Acquire does not allocate
	g            *Gateway
	hlog         healthLog // what was last logged of its availability

	engine atomic.Pointer[engineReport] // the engine's load as last scraped; nil: unknown
	cache  atomic.Int64                 // the engine's KV cache in tokens, as last reported (CacheTokens)

	// For least_ttft: id names u in the prefix index (from a counter, never
	// reused), hash in rendezvous hashing (of URL: the same in every
	// replica), model predicts its TTFT (Observe teaches it); computed
	// counts the prompt tokens routed to u that the index did not expect
	// cached there (the prefix index's marks: predict.Expected.Distance);
	// busyUntil is when, on the gateway's clock, the engine time routed to
	// u is predicted done (predict.Load.Backlog); reprobe says u's last
	// probe came sooner than the prediction it passed over (least_ttft's
	// probeAge). For the probes past an SLO (sloProbeAge): sloProbed is
	// when the last was sent (gateway clock; 0: never), sloBackoff counts
	// those sent since one met its SLO or a request was routed on its
	// prediction, and sloReprobe says the last met its SLO.
	id         uint32
	hash       uint64
	model      *predict.Model
	computed   atomic.Uint64
	busyUntil  atomic.Int64
	reprobe    atomic.Bool
	sloProbed  atomic.Int64
	sloBackoff atomic.Int32
	sloReprobe atomic.Bool
	// homes is the prompts last sent to u, for room (fits).
	homes homes
	// With share_routing: leastTTFT says u is in a least_ttft pool (its
	// requests' ends are published); remote is the other replicas'
	// requests on u as they last published them (by replica, under
	// remoteMu), remoteInFlight their sum.
	leastTTFT      atomic.Bool
	remoteMu       sync.Mutex
	remote         map[uint64]remoteLoad
	remoteInFlight atomic.Int64
	// prefilling is this replica's requests on u with no first token yet
	// (predict.Load.Ahead): last, its requests' array away from the fields
	// a choice reads.
	prefilling predict.Prefilling
}

// newUpstream makes the Upstream of u. g.mu is held.
func newUpstream(g *Gateway, u upstreamURL) *Upstream {
	g.lastID++
	up := &Upstream{Name: u.name, URL: u.base, g: g, id: g.lastID,
		hash: prefix.Hash([]byte(u.base)), model: predict.New(predict.Config{})}
	up.healthy.Store(true) // until a probe says otherwise
	up.releaseFn = up.release
	return up
}

// Healthy reports the last active health check's verdict (true without
// checks).
func (u *Upstream) Healthy() bool { return u.healthy.Load() }

// Ejected reports whether passive ejection has the upstream out of rotation.
func (u *Upstream) Ejected() bool { return u.ejectedUntil.Load() > u.g.now() }

// Outstanding returns the requests queued for or in flight on u.
func (u *Upstream) Outstanding() int64 { return u.outstanding.Load() }

func (u *Upstream) available(now int64) bool {
	if !u.healthy.Load() {
		return false
	}
	if until := u.ejectedUntil.Load(); until != 0 {
		if until > now {
			return false
		}
		u.ejectionOver(until) // back in rotation: say so, once
	}
	return true
}

// policy is a pool's policy as Pick switches on it.
type policy uint8

const (
	policyLeastRequest policy = iota
	policyRoundRobin
	policyLeastLoad
	policyLeastTTFT
)

// policyOf is the policy named name (a valid one).
func policyOf(name string) policy {
	switch name {
	case PolicyRoundRobin:
		return policyRoundRobin
	case PolicyLeastLoad:
		return policyLeastLoad
	case PolicyLeastTTFT:
		return policyLeastTTFT
	}
	return policyLeastRequest
}

// Pick chooses the upstream for a request on route r among the available
// ones (healthy, not ejected) by the pool's policy, ties going round robin:
// least_request, the fewest outstanding requests (queued + in flight);
// round_robin, the next in rotation; least_load, the least load its engine
// reports (leastLoad), or least_request while an upstream's engine load is
// unknown (no scrape yet, or the last one failed; logged when it starts
// and ends); least_ttft, as Choose without the request's prompt (no prefix
// affinity): Choose is its way in. except, when not
// nil, is skipped: the upstream that just failed, for the proxy's one retry
// after a failed connect (the upstream saw nothing, so another may have
// it). With no available upstream it returns a 503 Rejection
// (worker_failure / no_healthy_upstream); on a retry that means "no other
// upstream", and the proxy should answer with the first failure instead.
func (s *Snapshot) Pick(r *Route, except *Upstream) (*Upstream, *Rejection) {
	p := r.Pool
	if p.kind == policyLeastTTFT {
		c, rej := p.leastTTFT(nil, 0, 0, 0, except)
		return c.Upstream, rej
	}
	start := p.rr.Add(1)
	now := s.g.now()
	var best *Upstream
	switch p.kind {
	case policyRoundRobin:
		best = p.roundRobin(start, except, now)
	case policyLeastLoad:
		var unknown *Upstream
		best, unknown = p.leastLoad(start, except, now)
		p.noteLoadUnknown(unknown)
	}
	if best == nil {
		best = p.leastRequest(start, except, now)
	}
	if best == nil {
		return nil, noHealthy(p, except, now)
	}
	return best, nil
}

// leastRequest is the available upstream with the fewest outstanding
// requests, the first in rotation order from start on a tie; nil when none
// is available.
func (p *Pool) leastRequest(start uint32, except *Upstream, now int64) *Upstream {
	ups := p.Upstreams
	n := uint32(len(ups))
	var best *Upstream
	var bestLoad int64
	for i := range n {
		u := ups[(start+i)%n]
		if u == except || !u.available(now) {
			continue
		}
		if load := u.outstanding.Load(); best == nil || load < bestLoad {
			best, bestLoad = u, load
		}
	}
	return best
}

// roundRobin is the first available upstream in rotation order from start;
// nil when none is available.
func (p *Pool) roundRobin(start uint32, except *Upstream, now int64) *Upstream {
	ups := p.Upstreams
	n := uint32(len(ups))
	for i := range n {
		if u := ups[(start+i)%n]; u != except && u.available(now) {
			return u
		}
	}
	return nil
}

// leastLoad is the available upstream with the least engine load
// (loadKey), the first in rotation order from start on a tie. It returns
// no choice and the first available upstream whose load is unknown when
// there is one: loads cannot be compared with an unknown one.
func (p *Pool) leastLoad(start uint32, except *Upstream, now int64) (best, unknown *Upstream) {
	ups := p.Upstreams
	n := uint32(len(ups))
	var bestKey loadKey
	for i := range n {
		u := ups[(start+i)%n]
		if u == except || !u.available(now) {
			continue
		}
		k, known := u.loadKey()
		if !known {
			return nil, u
		}
		if best == nil || k.less(bestKey) {
			best, bestKey = u, k
		}
	}
	return best, nil
}

// noteLoadUnknown logs when least_load starts falling back because of
// unknown (nil: when it stops). Only a change logs, so Pick allocates
// nothing in a steady state.
func (p *Pool) noteLoadUnknown(unknown *Upstream) {
	fallback := unknown != nil
	if p.loadUnknown.Load() == fallback || !p.loadUnknown.CompareAndSwap(!fallback, fallback) {
		return
	}
	if fallback {
		p.g.log.Warn().Str("pool", p.Name).Str("upstream", unknown.Name).
			Msg("least_load: the engine's load is unknown (not scraped yet, or the scrape fails); picking by outstanding requests")
	} else {
		p.g.log.Info().Str("pool", p.Name).Msg("least_load: every engine's load is known again")
	}
}

func noHealthy(p *Pool, except *Upstream, now int64) *Rejection {
	// Retry when the first ejection ends or the next probe is due (a
	// passing one ends an ejection too), whichever comes first.
	wait := int64(math.MaxInt64)
	for _, u := range p.Upstreams {
		switch {
		case u == except:
		case u.healthy.Load():
			wait = min(wait, u.ejectedUntil.Load()-now)
			if next := u.nextProbe.Load(); next > now {
				wait = min(wait, next-now)
			}
		case u.nextProbe.Load() != 0:
			wait = min(wait, u.nextProbe.Load()-now)
		}
	}
	if wait == math.MaxInt64 {
		wait = int64(p.health.Interval)
	}
	secs := int(min(max((wait+int64(time.Second)-1)/int64(time.Second), 1), 3600))
	return &Rejection{
		Status: 503, RetryAfter: secs, Type: "server_error", Code: "no_healthy_upstream",
		Message: "no healthy upstream in pool " + p.Name + "; retry in " + strconv.Itoa(secs) + "s",
		Reason:  endreason.WorkerFailure, Detail: endreason.DetailNoHealthy,
	}
}

// Done reports how a request on u went, for passive ejection: ok false for
// a failure of the upstream (connect failed, 5xx, closed or reset before
// the end, engine error), true for anything else. Client cancels, our own
// deadlines and 4xx say nothing about the upstream: report them as ok or not
// at all. After ejection.consecutive_failures failures in a row the upstream
// is out of rotation for ejection.duration, or until an active health
// check passes; the ejection is logged, and so is its end when a Pick or a
// health check first sees it over.
func (g *Gateway) Done(u *Upstream, ok bool) {
	if ok {
		if u.fails.Load() != 0 { // read first: keep the hot line shared
			u.fails.Store(0)
		}
		return
	}
	after := u.ejectAfter.Load()
	if after <= 0 {
		return
	}
	if u.fails.Add(1) >= after {
		u.fails.Store(0)
		u.eject(int(after))
	}
}
