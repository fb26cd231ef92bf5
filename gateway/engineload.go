package gateway

import (
	"time"

	"github.com/ttftlens/ttftlens/gateway/predict"
)

// EngineLoad is an upstream's load as its engine reports it on its own
// /metrics (the proxy scrapes it and hands it to SetEngineLoad).
type EngineLoad struct {
	// Waiting and Running are the requests in the engine's queue and in
	// its running batch.
	Waiting, Running int64
	// KVCacheUsage is the fraction of its KV cache in use, 0 to 1, or
	// negative when the engine does not report it.
	KVCacheUsage float64
	// CacheTokens is the size of its KV cache in tokens, 0 when the
	// engine does not report it.
	CacheTokens int64
}

// engineReport is the last scrape of an upstream: the engine's load and
// the requests this replica had on the engine when the scrape began.
type engineReport struct {
	EngineLoad
	inFlight int64
}

// ScrapeMark is what SetEngineLoad needs to blend a scrape with this
// replica's own requests: the requests it has admitted to u (so the engine
// may count them). Read it just before the scrape's request is sent.
func (u *Upstream) ScrapeMark() int64 { return int64(u.InFlight()) }

// SetEngineLoad records a scrape of u's engine begun at mark (ScrapeMark),
// and the cache size it reports (SetCacheTokens).
func (u *Upstream) SetEngineLoad(l EngineLoad, mark int64) {
	u.engine.Store(&engineReport{EngineLoad: l, inFlight: mark})
	u.SetCacheTokens(l.CacheTokens)
}

// SetCacheTokens records the size of u's engine's KV cache in tokens, as a
// scrape reported it (with or without a load gauge): kept until another
// size is reported; 0 or less reports none and changes nothing.
func (u *Upstream) SetCacheTokens(n int64) {
	if n > 0 {
		u.cache.Store(n)
	}
}

// CacheTokens is the size of u's engine's KV cache in tokens as it last
// reported it (a failed scrape forgets the load, not the size), 0 if it
// never did.
func (u *Upstream) CacheTokens() int64 { return u.cache.Load() }

// ClearEngineLoad forgets u's engine load: the scrape failed, or the
// engine reports no load gauge. Until the next SetEngineLoad it is unknown.
func (u *Upstream) ClearEngineLoad() { u.engine.Store(nil) }

// EngineLoad returns u's engine load as last scraped, raw (not blended);
// false when unknown.
func (u *Upstream) EngineLoad() (EngineLoad, bool) {
	if r := u.engine.Load(); r != nil {
		return r.EngineLoad, true
	}
	return EngineLoad{}, false
}

// loadKey is an upstream's load as least_load compares it: waiting
// requests first, then running, then the KV-cache usage in whole percent
// (finer differences are noise; -1: not reported).
type loadKey struct {
	waiting, running, kvPercent int64
}

// less orders by waiting, then running, then KV-cache usage when both
// report it.
func (a loadKey) less(b loadKey) bool {
	if a.waiting != b.waiting {
		return a.waiting < b.waiting
	}
	if a.running != b.running {
		return a.running < b.running
	}
	return a.kvPercent >= 0 && b.kvPercent >= 0 && a.kvPercent < b.kvPercent
}

// loadKey blends u's last scrape with this replica's requests since, so
// that a burst between two scrapes does not all go to the engine that
// looked idlest. The engine counted the requests this replica had admitted
// when the scrape began (engineReport.inFlight); every request this
// replica has on u now beyond those (outstanding: queued here or sent
// since) is one the engine has not reported yet, and counts as waiting,
// the place a new request takes until the engine says otherwise. Fewer
// outstanding than at the scrape means some of ours ended since: the
// difference comes off waiting first (a running request that ended lets a
// waiting one in), then off running. known is false when u has no load.
func (u *Upstream) loadKey() (k loadKey, known bool) {
	r := u.engine.Load()
	if r == nil {
		return k, false
	}
	k.waiting = r.Waiting + u.outstanding.Load() - r.inFlight
	k.running = r.Running
	if k.waiting < 0 {
		k.running = max(k.running+k.waiting, 0)
		k.waiting = 0
	}
	k.kvPercent = -1
	if r.KVCacheUsage >= 0 {
		k.kvPercent = int64(r.KVCacheUsage * 100)
	}
	return k, true
}

// PredictLoad is u's load now as gateway/predict takes it: the requests
// ahead at its engine, as least_load blends them (loadKey's waiting: the
// last scrape's waiting count, this replica's requests since counted as
// waiting), when the engine's load is known; and this replica's
// outstanding requests on u (queued here or in flight); and the engine
// time routed to u predicted not done yet (its backlog). Choose reads it
// into Choice.Load; read at routing, it is the request's
// Observation.Load.
func (u *Upstream) PredictLoad() predict.Load { return u.loadAt(u.g.now()) }

// loadAt is PredictLoad at now, the gateway's clock as read once for a
// choice among many upstreams.
func (u *Upstream) loadAt(now int64) predict.Load {
	l := predict.Load{InFlight: u.outstanding.Load() + u.remoteInFlight.Load(), Backlog: max(time.Duration(u.busyUntil.Load()-now), 0),
		Ahead: u.prefilling.Wait(time.Duration(now))}
	if k, known := u.loadKey(); known {
		l.Waiting, l.EngineKnown = k.waiting, true
	}
	return l
}
