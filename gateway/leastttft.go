package gateway

import (
	"time"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// blockTokens is the prompt tokens a matched block of the chain is expected
// to have cached: its 64 bytes at the estimate's ~4 bytes a token (a block
// of token ids holds 16 exactly).
const blockTokens = prefix.BlockBytes / bytesPerToken

// Choice is Choose's decision: the upstream, and what the record keeps of
// how it was chosen. Beside Upstream and Load it is filled only in a
// least_ttft pool.
type Choice struct {
	Upstream *Upstream
	// Prediction is the chosen upstream's predicted TTFT past routing, when
	// Predicted (its model had a prediction for the request).
	Prediction predict.Prediction
	Predicted  bool
	// Affinity says prefix affinity chose the upstream, not the lowest
	// prediction: no upstream under the bound had a prediction (where the
	// request's longest recorded prefix was last served, else rendezvous
	// hashing on its first message), a new prompt was placed (place), or
	// the request stayed where its prefix is held though another upstream
	// was predicted sooner (placeWithin).
	Affinity bool
	// Probe says the upstream was chosen to learn how it is now, past
	// the predictions: it had none for the request, or its model was
	// measured long ago, or its last probe came sooner than the
	// prediction it passed over (probeAge). Passed is then the soonest
	// prediction of the others (before a new prompt's placement).
	// PastSLO says the probe is a request whose SLO every prediction
	// misses, sent rather than refused to an upstream predicted to hold
	// most of its prompt whose model was measured long ago (sloProbeAge);
	// Passed is then what was left of the SLO.
	Probe   bool
	PastSLO bool
	Passed  time.Duration
	// Expected is what the prefix index expected of the chosen upstream's
	// prefix cache: the blocks it matched there, 16 tokens each (none when
	// it has not seen the upstream serve them), and the distance the
	// prediction judged their residency by.
	Expected predict.Expected
	// Load is the chosen upstream's load when it was chosen (as the
	// prediction took it, in a least_ttft pool): the request's
	// Observation.Load. It is filled in every pool.
	Load predict.Load
	// prefilling is the request's id in its upstream's requests without a
	// first token (Commit; Upstream.Prefilled), 0 when it is not there.
	prefilling uint64
}

// Choose chooses the upstream for req (a valid Request of this Snapshot) as
// Pick does for its route, except in a least_ttft pool, where it routes by
// the request's prompt and size too and says how in the Choice. except is
// Pick's. It changes nothing: call Commit once the request is to be sent
// (RefuseSLO did not refuse it), and req.Release after the last Choose and
// Commit for the request.
func (s *Snapshot) Choose(req *Request, except *Upstream) (Choice, *Rejection) {
	if p := req.Route.Pool; p.kind == policyLeastTTFT {
		return p.leastTTFT(req.prompt, req.PromptTokens, req.SLO, req.Spent, except)
	}
	u, rej := s.Pick(req.Route, except)
	if rej != nil {
		return Choice{}, rej
	}
	return Choice{Upstream: u, Load: u.PredictLoad()}, nil
}

// leastTTFT is least_ttft (docs/routing.md, "The policy"): of the available
// upstreams under the load bound (bound), the one of the lowest
// predicted TTFT for a request of tokens whose prompt is pr (nil: none
// known), its expected cached tokens counted where the prefix index saw
// its longest recorded prefix served; the first in rotation order on a
// tie. A request whose prefix some upstreams are predicted to hold (at
// least half its tokens: a shared opening is no home) goes to the soonest
// of them while it is predicted within placeWithin times the soonest of
// all, and within what is left of its SLO (slo less spent, the time spent
// before routing): a miss elsewhere would make the prompt a second home
// there, evicting what that cache held; past that bound it goes to the
// soonest, or, when the soonest's cache has no room for the prompt, to the
// soonest with room within the bound (leave). A prompt no upstream is
// predicted to hold is placed instead (place), within the same, where a
// cache has room for it. An upstream with no
// prediction for the request (no model yet; a model that has seen only
// hits, for a prompt it would compute) takes it as a probe when it has
// nothing in flight; a request that states an SLO probes only one with no
// model at all. Otherwise it is passed over. Failing such a probe, an
// upstream whose model was measured long ago, or is to be probed again,
// is probed (probeAge), unless it is the soonest already. A request whose
// SLO the choice is predicted to miss (RefuseSLO would refuse it) is sent
// instead, as a probe past its SLO, to the soonest of the upstreams
// predicted to hold most of its prompt that may take one
// (mayProbePastSLO: measured long ago, nothing ahead), when it is a first
// choice (not a retry's, except nil): refused requests teach no model,
// and a route whose every request states the SLO would otherwise stay
// refused on what its engines did long ago. (A probe of a prompt to
// compute would hold the engine for a whole prompt's prefill, and hold
// up the requests admitted there on their prediction behind it.) While
// no upstream has a prediction, prefix affinity chooses (affinity).
// Commit records the choice.
func (p *Pool) leastTTFT(pr *prompt, tokens int, slo, spent time.Duration, except *Upstream) (Choice, *Rejection) {
	start := p.rr.Add(1)
	now := p.g.now()
	var m prefix.Match
	if pr != nil && len(pr.chain) > 0 {
		m = p.index.Lookup(pr.chain)
	}
	ups := p.Upstreams
	n := uint32(len(ups))
	var avail int
	var total int64
	for _, u := range ups {
		if u != except && u.available(now) {
			avail++
			total += max(u.outstanding.Load(), 0)
		}
	}
	if avail == 0 {
		return Choice{}, noHealthy(p, except, now)
	}
	bound := p.bound(total, avail)
	// probe: one with no prediction; stale: one measured long ago, or to
	// probe again; home: the soonest of those predicted to hold most of
	// pr; pastSLO: the soonest of those that may take a request past its
	// SLO (mayProbePastSLO).
	var c, probe, stale, home, pastSLO Choice
	fresh := false // some upstream has been measured within probeAge
	for i := range n {
		u := ups[(start+i)%n]
		if !eligible(u, except, now, bound) {
			continue
		}
		load, x := u.loadAt(now), expectedOn(&m, u)
		pred, ok := u.model.Predict(time.Duration(now), tokens, x, load)
		if !ok {
			// Unpredicted: the request is its one way to learn. A model
			// it has (of hits) cannot vouch for an SLO; one it has not
			// is made by any request (where every request states an SLO,
			// it would never be).
			if probe.Upstream == nil && u.outstanding.Load() == 0 && (slo <= 0 || !u.model.Observed()) {
				probe = Choice{Upstream: u, Probe: true, Expected: x, Load: load}
			}
			continue
		}
		hitThere := 2*x.Cached >= tokens && x.Cached > 0 && !pred.Evicted // u is predicted to hold most of pr
		if hitThere && (home.Upstream == nil || pred.Total < home.Prediction.Total) {
			home = Choice{Upstream: u, Prediction: pred, Predicted: true, Affinity: true, Expected: x, Load: load}
		}
		fresh = fresh || pred.Age < probeAge
		if stale.Upstream == nil && slo <= 0 && (pred.Age >= probeAge || u.reprobe.Load()) && u.outstanding.Load() == 0 {
			stale = Choice{Upstream: u, Prediction: pred, Predicted: true, Probe: true, Expected: x, Load: load}
		}
		if c.Upstream == nil || pred.Total < c.Prediction.Total {
			c = Choice{Upstream: u, Prediction: pred, Predicted: true, Expected: x, Load: load}
		}
		if slo > spent && except == nil && hitThere && (pastSLO.Upstream == nil || pred.Total < pastSLO.Prediction.Total) && mayProbePastSLO(u, now, &pred, load) {
			pastSLO = Choice{Upstream: u, Prediction: pred, Predicted: true, Probe: true, PastSLO: true, Passed: slo - spent, Expected: x, Load: load}
		}
	}
	if c.Upstream == nil {
		c = p.affinity(start, except, now, pr, &m, bound, tokens)
	}
	soonest := c.Prediction.Total
	within := placeWithin * soonest // what staying home or placing may cost
	far := placeFarWithin * soonest // the same, where no cache within has room for the prompt
	if slo > 0 {
		within, far = min(within, slo-spent), min(far, slo-spent)
	}
	if home.Upstream != nil && home.Upstream != c.Upstream {
		if home.Prediction.Total <= within {
			c = home // stays home (docs/routing.md, "Staying home")
		} else if pr != nil && pr.lead > 0 {
			p.leave(&c, &home, except, now, pr.chain[pr.lead-1], pr.lead*blockTokens, &m, bound, tokens, within, far)
		}
	}
	if c.Predicted && home.Upstream == nil && pr != nil && pr.lead > 0 && (pr.lead < len(pr.chain) || m.Blocks > 0) {
		p.place(&c, except, now, pr.chain[pr.lead-1], &m, bound, tokens, pr.lead*blockTokens, within, far)
	}
	if probe.Upstream == nil && fresh && stale.Upstream != nil && stale.Prediction.Total > soonest {
		probe = stale // (the soonest needs no probe: it is chosen on its prediction, or passed over to stay home)
	}
	if probe.Upstream != nil && c.Predicted && probe.Upstream != c.Upstream {
		probe.Passed = soonest
		c = probe
	}
	if pastSLO.Upstream != nil && c.Predicted && !c.Probe && spent+c.Prediction.Total > slo {
		c = pastSLO // not refused on stale predictions (docs/routing.md, "TTFT SLOs")
	}
	if c.Upstream == nil { // loads rose past the bound since it was taken
		c.Upstream = p.leastRequest(start, except, now)
		if c.Upstream == nil {
			return Choice{}, noHealthy(p, except, now)
		}
		c.Load = c.Upstream.loadAt(now)
	}
	return c, nil
}

// Commit notes that req, routed as c by Choose, is being sent. In a
// least_ttft pool, c's upstream takes the request's tokens into its count
// of tokens computed (all of them, or those past what was expected
// cached) and its predicted engine time into its backlog, and is recorded
// in the prefix index as the latest to serve req's chain, with that count
// as its mark, and in its homes (room) as the latest sent the prompt of
// req's first message. Elsewhere it does nothing. A request refused after Choose
// is not committed, and leaves no trace.
func (s *Snapshot) Commit(req *Request, c *Choice) {
	if p := req.Route.Pool; p.kind == policyLeastTTFT && c.Upstream != nil {
		p.commit(req.prompt, req.PromptTokens, req.Stream, c)
	}
}

func (p *Pool) commit(pr *prompt, tokens int, stream bool, c *Choice) {
	computed := tokens
	if c.Expected.Cached > 0 && !c.Prediction.Evicted {
		computed = max(tokens-c.Expected.Cached, 0)
	}
	mark := c.Upstream.computed.Add(uint64(computed))
	now := p.g.now()
	var work time.Duration
	due := time.Duration(now) // without a prediction: overdue at once, predicted to take as long again as it has
	if c.Predicted {
		work = c.Prediction.Work()
		c.Upstream.addBacklog(now, work)
		due += c.Prediction.Total
	}
	if stream { // a whole response's first token is seen only at its end, after its whole decode
		c.prefilling = c.Upstream.prefilling.Add(time.Duration(now), due)
	}
	if c.PastSLO { // counted as missed until it is seen to meet it (Observe)
		c.Upstream.sloProbed.Store(now)
		c.Upstream.sloReprobe.Store(false)
		if c.Upstream.sloBackoff.Add(1) > maxSLOBackoff {
			c.Upstream.sloBackoff.Store(maxSLOBackoff)
		}
	}
	if pr != nil && len(pr.chain) > 0 {
		p.index.Record(pr.chain, c.Upstream.id, mark)
		if pr.lead > 0 {
			c.Upstream.homes.note(pr.chain[pr.lead-1], pr.lead*blockTokens, mark)
		}
	}
	p.g.publish(c, pr, uint64(computed), work)
}

// Prefilled notes that the request routed as c (and committed) has its
// first token, or ended without one: it is no longer ahead of the requests
// routed to c's upstream after it in their prefill (predict.Load.Ahead).
// Only a streamed request is tracked: a whole response's first token is
// seen at its end, after its whole decode.
// Call it once the first token comes and again at the request's end (and
// before a retry's choice); only the first call counts. It does nothing for
// a choice outside a least_ttft pool.
func (c *Choice) Prefilled() {
	if c.prefilling != 0 {
		c.Upstream.prefilling.Remove(c.prefilling)
		c.prefilling = 0
	}
}

// addBacklog adds work, engine time predicted for a request routed at now,
// to u's backlog: it runs from when the work before it is predicted done,
// or from now if that is past.
func (u *Upstream) addBacklog(now int64, work time.Duration) {
	for {
		old := u.busyUntil.Load()
		if u.busyUntil.CompareAndSwap(old, max(old, now)+int64(work)) {
			return
		}
	}
}

// bound is least_ttft's load bound for avail upstreams holding total
// outstanding requests: an upstream holding it or more is passed over.
// It is prefix.Bound (ε = prefix.DefaultEpsilon) plus the pool's slack:
// the bound alone keeps an upstream within one or two requests of the
// others while loads are small (⌈1.25·2/3⌉ = 1: a second request in
// flight never joins the first), which scattered the requests that share
// a prefix over every engine, and with them the engines' prefix caches.
func (p *Pool) bound(total int64, avail int) int64 {
	return prefix.Bound(total, avail, prefix.DefaultEpsilon) + p.slack
}

// probeAge is how long an upstream goes unobserved, while another in its
// pool was observed, before a request without an SLO is sent to it
// whatever its prediction (a probe), when it has nothing in flight. (A
// pool whose traffic is too light to have measured any upstream that
// recently is not probed: its requests would leave the engines that hold
// their prefixes.) An upstream whose prediction was set by a moment
// now past (a queue at a cold start, a burst) is sent nothing, and so
// never predicted otherwise, until then. A probe that came sooner than
// the prediction it passed over is followed by another once it has
// ended, until one does not or the upstream is chosen by its prediction
// again: the model forgets what it learned before the quiet spell over a
// few half-lives of new observations, not at the first.
const probeAge = 5 * predict.DefaultHalfLife

// maxSLOBackoff bounds sloProbeAge's doubling: at most 16 probeAges
// (160 s) between probes past an SLO.
const maxSLOBackoff = 4

// sloProbeAge is how long both u's model must have gone unobserved and
// its last probe past an SLO been sent before it takes another: probeAge,
// doubled for each sent since one met its SLO or a request was routed to
// u on its prediction (up to maxSLOBackoff times). On a route whose SLO
// no upstream can meet an upstream takes one at 10, 20, 40, 80 s, then
// every 160 s, not one each 10 s; a probe that ends without a first
// token counts as one that missed.
func sloProbeAge(u *Upstream) time.Duration {
	return probeAge << min(max(u.sloBackoff.Load(), 0), maxSLOBackoff)
}

// mayProbePastSLO says u, predicted pred at load when routing at now, may
// take a request whose SLO the predictions miss: it has nothing ahead
// (nothing of this replica's, or of the others' it has heard of, in
// flight there, none waiting at the engine: its queue is measured now,
// not stale), and its last probe past an SLO met it, or its model was
// measured and its last such probe sent sloProbeAge ago or more.
func mayProbePastSLO(u *Upstream, now int64, pred *predict.Prediction, load predict.Load) bool {
	if !load.Idle() || u.outstanding.Load() != 0 {
		return false
	}
	if u.sloReprobe.Load() {
		return true
	}
	age := sloProbeAge(u)
	at := u.sloProbed.Load()
	return pred.Age >= age && (at == 0 || time.Duration(now-at) >= age)
}

// placeWithin bounds what placing a prompt, or keeping a request where
// its prefix is held, may cost the request: twice the soonest prediction.
const placeWithin = 2

// place is least_ttft's choice for a prompt no upstream is predicted to
// hold (a new one, or one evicted everywhere: m, the index's match, names
// none but as evicted) that is likely to come again (its first message is
// followed by others, as a system prompt is by a question, or the index
// has seen some of it before: a lone new message is left to the soonest,
// as nothing would find it where it was placed), c the soonest prediction:
// where rendezvous hashing on key (its first message, of lead tokens)
// prefers, among the upstreams under bound predicted within limit
// (placeWithin times c's total, and what is left of the SLO) whose cache
// has room for it (fits); failing one, the soonest with room of those
// whose engine reports its cache's size (soonestWithRoom), within far
// (placeFarWithin times c's total, and what is left of the SLO); failing
// that, where the hashing prefers within limit. Every request of the
// prompt that follows finds it there. Left to the soonest prediction,
// every new prompt went to the engines of the
// fastest prefill until their caches thrashed, and an engine of a slower
// prefill but room in its cache held nothing: one request placed a little
// later saves the prompt's prefill on every one after it. It marks c as
// affinity's choice when it moves it.
func (p *Pool) place(c *Choice, except *Upstream, now int64, key uint64, m *prefix.Match, bound int64, tokens, lead int, limit, far time.Duration) {
	var within, fit Choice // the hashing's choice within limit, and among those with room
	var withinW, fitW uint64
	sized := false // some eligible upstream's engine reports its cache's size
	for _, u := range p.Upstreams {
		if !eligible(u, except, now, bound) {
			continue
		}
		sized = sized || u.CacheTokens() > 0
		w := prefix.Weight(key, u.hash)
		beatsWithin := within.Upstream == nil || w > withinW
		if !beatsWithin && fit.Upstream != nil && w <= fitW {
			continue // it would win nothing: no prediction needed
		}
		room := u.fits(key, lead)
		if !beatsWithin && !room {
			continue
		}
		load, x := u.loadAt(now), expectedOn(m, u)
		if pred, ok := u.model.Predict(time.Duration(now), tokens, x, load); ok && pred.Total <= limit {
			ch := Choice{Upstream: u, Prediction: pred, Predicted: true, Affinity: true, Expected: x, Load: load}
			if within.Upstream == nil || w > withinW {
				within, withinW = ch, w
			}
			if room && (fit.Upstream == nil || w > fitW) {
				fit, fitW = ch, w
			}
		}
	}
	best := fit
	if best.Upstream == nil && sized {
		if best = p.soonestWithRoom(except, now, key, lead, m, bound, tokens, far); best.Upstream != nil {
			best.Affinity = true
		}
	}
	if best.Upstream == nil {
		best = within
	}
	if best.Upstream != nil && best.Upstream != c.Upstream {
		*c = best
	}
}

// placeFarWithin bounds what placing a prompt where its cache has room may
// cost when no cache within placeWithin has: four times the soonest
// prediction (an engine of a prefill twice as slow, behind a request or
// two), so that a sick engine, whose cache always has room, is not sent
// every prompt the others cannot hold. It bounds as well how long a
// request may wait at its prompt's home rather than evict a prompt from a
// full cache (leave).
const placeFarWithin = 4

// soonestWithRoom is the soonest of the upstreams under bound whose engine
// reports its cache's size and whose cache has room for the prompt (its
// first message's key and lead tokens: fits), predicted within limit; none
// if none is. It is place's choice when no upstream within placeWithin has
// room (limit: placeFarWithin times the soonest, and what is left of the
// SLO), and leave's.
func (p *Pool) soonestWithRoom(except *Upstream, now int64, key uint64, lead int, m *prefix.Match, bound int64, tokens int, limit time.Duration) Choice {
	var best Choice
	for _, u := range p.Upstreams {
		if !eligible(u, except, now, bound) || u.CacheTokens() <= 0 || !u.fits(key, lead) {
			continue
		}
		load, x := u.loadAt(now), expectedOn(m, u)
		if pred, ok := u.model.Predict(time.Duration(now), tokens, x, load); ok && pred.Total <= limit && (best.Upstream == nil || pred.Total < best.Prediction.Total) {
			best = Choice{Upstream: u, Prediction: pred, Predicted: true, Expected: x, Load: load}
		}
	}
	return best
}

// leave is least_ttft's choice for a request leaving the upstream that
// holds its prompt (its home, predicted past limit), c the soonest
// prediction: when c's cache has no room for the prompt, the soonest
// within limit whose cache has (soonestWithRoom); failing that, home, while
// it is predicted within far (placeFarWithin times the soonest, and what
// is left of the SLO). A copy of the prompt where there is room evicts
// nothing the engine still serves; where there is none it evicts another
// prompt, whose next request misses and evicts in turn, and waiting at
// home costs less.
func (p *Pool) leave(c, home *Choice, except *Upstream, now int64, key uint64, lead int, m *prefix.Match, bound int64, tokens int, limit, far time.Duration) {
	if c.Upstream == nil || c.Upstream.fits(key, lead) {
		return
	}
	if best := p.soonestWithRoom(except, now, key, lead, m, bound, tokens, limit); best.Upstream != nil {
		*c = best
	} else if home.Prediction.Total <= far {
		*c = *home
	}
}

// eligible says u may be chosen: not excepted, available at now, and
// holding fewer outstanding requests than bound.
func eligible(u, except *Upstream, now, bound int64) bool {
	return u != except && u.available(now) && u.outstanding.Load() < bound
}

// expectedOn is what the index's match m expects cached on u: its blocks,
// if the index saw u serve them, at the distance of the tokens u was sent
// to compute since.
func expectedOn(m *prefix.Match, u *Upstream) predict.Expected {
	if pl, ok := m.On(u.id); ok {
		return predict.Expected{Cached: m.Blocks * blockTokens, Distance: u.computed.Load() - pl.Mark}
	}
	return predict.Expected{}
}

// affinity is least_ttft's choice while no model predicts: the upstream the
// index matched (m) when it is available and under bound, else the one
// rendezvous hashing prefers for the key of pr's first message among those
// under bound whose cache has room for it (fits), or among all under bound
// if none has, else (no prompt known) the fewest outstanding requests.
// Its prediction is in the Choice when its model has one.
func (p *Pool) affinity(start uint32, except *Upstream, now int64, pr *prompt, m *prefix.Match, bound int64, tokens int) Choice {
	var best *Upstream
	if m.Blocks > 0 {
		for _, u := range p.Upstreams {
			if u.id == m.Latest() && eligible(u, except, now, bound) {
				best = u
				break
			}
		}
	}
	if best == nil && pr != nil && pr.lead > 0 {
		key := pr.chain[pr.lead-1]
		var fit *Upstream // the hashing's choice among those with room
		var bestW, fitW uint64
		for _, u := range p.Upstreams {
			if !eligible(u, except, now, bound) {
				continue
			}
			w := prefix.Weight(key, u.hash)
			if best == nil || w > bestW {
				best, bestW = u, w
			}
			if (fit == nil || w > fitW) && u.fits(key, pr.lead*blockTokens) {
				fit, fitW = u, w
			}
		}
		if fit != nil {
			best = fit
		}
	}
	affine := best != nil
	if !affine {
		if best = p.leastRequest(start, except, now); best == nil {
			return Choice{}
		}
	}
	c := Choice{Upstream: best, Affinity: affine, Expected: expectedOn(m, best), Load: best.loadAt(now)}
	c.Prediction, c.Predicted = best.model.Predict(time.Duration(now), tokens, c.Expected, c.Load)
	return c
}

// Observe teaches u's TTFT model (gateway/predict) one finished request,
// for least_ttft's predictions, routed by c (its last Choice). The proxy
// calls it once per record that ended on u, in any pool (a model learns the
// same whatever chose its upstream), with the Observation filled as
// gateway/predict says:
//
//   - End: the gateway's clock (Gateway.Now) read when the request ended:
//     Choose predicts on it. (The request clock's stages.Monotonic runs on the same
//     monotonic clock from another origin, less than a millisecond apart:
//     only a prediction's Age would show the difference.)
//   - FirstToken, Parts and Unsplit: the record's breakdown (its OK, its
//     stages queue to transport, upstream_unsplit).
//   - PromptTokens: the engine's usage count, else Request.PromptTokens;
//     EstimatedTokens: Request.PromptTokens when PromptTokens is the
//     engine's count;
//     CachedTokens and CachedReported: the cached tokens the engine
//     reported, if it did; Expected: Choice.Expected.
//   - Load: Choice.Load, the load the request was routed with.
//
// A probe (c.Probe) that came sooner than the prediction it passed over
// has u probed again (probeAge); a probe past an SLO (c.PastSLO) that met
// it has u take the next request past its SLO, and a request routed on
// its prediction (not a probe) ends the doubling of sloProbeAge. A prefix
// the choice counted as cached on u, which the engine reported it
// computed, is counted into u's computed tokens now: the distances of
// the prefixes behind it must see what the engine's cache really took,
// or a thrashing engine's would stay short, and its prefixes predicted
// cached.
//
// The request is no longer ahead of others in its prefill (c.Prefilled).
//
// With share_routing, the observation is published to the other replicas
// (gateway/share), whose models of u learn it too.
//
// It takes the model's mutex and allocates nothing.
func (u *Upstream) Observe(c *Choice, o predict.Observation) {
	c.Prefilled()
	u.model.Observe(o)
	if o.FirstToken && u.leastTTFT.Load() {
		u.g.publishObserved(u, &o)
	}
	switch {
	case c.PastSLO:
		if o.FirstToken && o.Parts.Sum() <= c.Passed {
			u.sloBackoff.Store(0)
			u.sloReprobe.Store(true)
		}
	case c.Probe:
		u.reprobe.Store(o.FirstToken && o.Parts.Sum() < c.Passed)
	case c.Predicted:
		u.reprobe.Store(false)
		u.sloBackoff.Store(0)
		u.sloReprobe.Store(false)
	}
	if x := c.Expected; x.Cached > 0 && !c.Prediction.Evicted && o.CachedReported && o.CachedTokens*2 < x.Cached {
		u.computed.Add(uint64(x.Cached))
		u.g.publishCount(u, u.outstanding.Load(), uint64(x.Cached)) // the other replicas' counts of it too
	}
}
