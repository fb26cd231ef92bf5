package gateway

import (
	"sync"
	"time"
)

// healthLog keeps an upstream's availability (healthy and not ejected: what
// ttftlens_upstream_healthy shows) as last logged. Every change of the
// verdict or the ejection happens under mu, together with the comparison,
// so each transition is logged exactly once, by the event that made it,
// and nothing is logged while the availability stays the same (no line per
// check).
type healthLog struct {
	mu       sync.Mutex
	out      bool  // the last line said: out of rotation
	since    int64 // gateway clock when it went out
	probeErr error // the last failed probe's error, until a probe passes
	passing  bool  // the last probe passed
}

// settle compares u's availability now with the last line; on a change it
// records the new state. outFor is how long it was out, when it comes back.
// u.hlog.mu is held.
func (u *Upstream) settle(now int64) (out, changed bool, outFor time.Duration) {
	h := &u.hlog
	out = !u.healthy.Load() || u.ejectedUntil.Load() > now
	if out == h.out {
		return out, false, 0
	}
	h.out = out
	if out {
		h.since = now
		return out, true, 0
	}
	return out, true, time.Duration(now - h.since)
}

// endEjection clears an ejection that ended by now. u.hlog.mu is held.
func (u *Upstream) endEjection(now int64) {
	if until := u.ejectedUntil.Load(); until != 0 && until <= now {
		u.ejectedUntil.CompareAndSwap(until, 0)
	}
}

// setVerdict records an active health check's result (err nil: passed) for
// pool, ends a passive ejection when it passed, and tells the probe watchers (WatchProbes) when it is the first to
// pass, or the first after a failure.
func (u *Upstream) setVerdict(pool string, err error) {
	if u.verdict(pool, err) {
		u.g.probePassed(u)
	}
}

// verdict is setVerdict's record and log line; it reports whether the
// probe is the first to pass, or the first after a failure.
func (u *Upstream) verdict(pool string, err error) (cameUp bool) {
	u.hlog.mu.Lock()
	defer u.hlog.mu.Unlock()
	now := u.g.now()
	ok := err == nil
	cameUp = ok && !u.hlog.passing
	u.hlog.passing = ok
	u.hlog.probeErr = err
	flipped := u.healthy.Swap(ok) != ok
	u.endEjection(now)
	// A passing probe ends a passive ejection too: the failures that
	// ejected it (an engine restarting kills its streams and refuses
	// connects) are over once the engine answers its health path.
	probeEnded := ok && u.ejectedUntil.Swap(0) != 0
	out, changed, outFor := u.settle(now)
	switch {
	case !changed:
	case out: // only a failed check takes it out here: an ejection was out already
		u.g.log.Warn().Str("upstream", u.Name).Str("pool", pool).
			Str("reason", "health check failed").Err(err).Msg("upstream unhealthy")
	case flipped || probeEnded:
		u.recovered(pool, "health check passed", outFor)
	default:
		u.recovered(pool, "ejection ended", outFor)
	}
	return cameUp
}

// eject takes u out of rotation for its ejection duration after failures
// consecutive failures (passive ejection).
func (u *Upstream) eject(failures int) {
	u.hlog.mu.Lock()
	defer u.hlog.mu.Unlock()
	now := u.g.now()
	// An ejection that ended unseen (no request picked since) is logged as
	// over first, so every "unhealthy" line has its "recovered".
	u.endEjection(now)
	if _, changed, outFor := u.settle(now); changed {
		u.recovered("", "ejection ended", outFor)
	}
	ejectFor := u.ejectFor.Load()
	u.ejectedUntil.Store(now + ejectFor)
	if out, changed, _ := u.settle(now); changed && out {
		u.g.log.Warn().Str("upstream", u.Name).Str("reason", "passive ejection").
			Int("consecutive_failures", failures).Str("ejected_for", time.Duration(ejectFor).String()).
			Msg("upstream unhealthy")
	}
}

// ejectionOver is Pick finding u's ejection (until, gateway clock) over: it
// clears it and logs u's return, once, whoever sees it first.
func (u *Upstream) ejectionOver(until int64) {
	u.hlog.mu.Lock()
	defer u.hlog.mu.Unlock()
	if !u.ejectedUntil.CompareAndSwap(until, 0) {
		return // seen already, or ejected again
	}
	if out, changed, outFor := u.settle(u.g.now()); changed && !out {
		u.recovered("", "ejection ended", outFor)
	}
}

// checksRemoved marks u healthy because a reload left its pool without
// health checks.
func (u *Upstream) checksRemoved() {
	u.hlog.mu.Lock()
	defer u.hlog.mu.Unlock()
	if u.healthy.Swap(true) {
		return
	}
	now := u.g.now()
	u.endEjection(now)
	if out, changed, outFor := u.settle(now); changed && !out {
		u.recovered("", "health check removed", outFor)
	}
}

// recovered logs u's return to rotation. u.hlog.mu is held.
func (u *Upstream) recovered(pool, reason string, outFor time.Duration) {
	e := u.g.log.Info().Str("upstream", u.Name)
	if pool != "" {
		e = e.Str("pool", pool)
	}
	e.Str("reason", reason).Str("unhealthy_for", outFor.Round(time.Millisecond).String()).Msg("upstream recovered")
}
