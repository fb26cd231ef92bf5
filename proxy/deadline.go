package proxy

import "time"

// deadlines are a request's time limits (0 = none): ttft and total as
// offsets from receipt, idle as the longest time without content after the
// first token (relay.lastContent).
type deadlines struct {
	ttft, total, idle time.Duration
}

// armDeadlines starts the deadline timer for the lease's deadlines, on the
// proxy's clock.
func (x *exchange) armDeadlines() {
	d := x.lease.dl
	if d.ttft <= 0 && d.total <= 0 && d.idle <= 0 {
		return
	}
	tl, r := &x.fin.rec.Timeline, &x.relay
	first := nextDeadline(d, tl.Now(), false, 0)
	if first < 0 {
		return
	}
	x.ctl.arm(x.p.cfg.Clock, x.gen, first, func() (time.Duration, error) {
		now := tl.Now()
		sawFirst := r.firstToken.Load()
		last := time.Duration(r.lastContent.Load())
		switch {
		case d.total > 0 && now >= d.total:
			return 0, errTotalDeadline
		case !sawFirst && d.ttft > 0 && now >= d.ttft:
			return 0, errTTFTDeadline
		case sawFirst && d.idle > 0 && now-last >= d.idle:
			return 0, errIdleDeadline
		}
		next := nextDeadline(d, now, sawFirst, last)
		if next < 0 {
			next = time.Hour // nothing left to enforce: look again much later
		}
		return next, nil
	})
}

// firstTokenSeen moves the deadline timer from the first-token deadline to
// the idle one. The timer rechecks the idle deadline when it fires, so this
// is the only reset.
func (x *exchange) firstTokenSeen(now time.Duration) {
	if x.lease.dl.idle > 0 {
		x.ctl.rearm(x.gen, nextDeadline(x.lease.dl, now, true, now))
	}
}

// nextDeadline returns the delay from now until the earliest deadline that
// still applies, or -1 when none does.
func nextDeadline(d deadlines, now time.Duration, sawFirst bool, last time.Duration) time.Duration {
	next := time.Duration(-1)
	consider := func(at time.Duration) {
		if wait := max(at-now, time.Millisecond); next < 0 || wait < next {
			next = wait
		}
	}
	if d.total > 0 {
		consider(d.total)
	}
	if !sawFirst && d.ttft > 0 {
		consider(d.ttft)
	}
	if sawFirst && d.idle > 0 {
		consider(last + d.idle)
	}
	return next
}
