package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// The knee workload: the highest rate of new streams one pinned core of
// proxy sustains with added TTFT p99 within kneeBudget. A stepped ramp:
// each step opens new streams, each on its own connection, at a fixed rate
// for kneePlan.step, once directly and once through the proxy (one process
// for the whole ramp); the proxy's added TTFT p99 at a rate is its p99
// minus the direct run's at the same rate, each TTFT from the stream's dial.
// Rates grow by kneePlan.factor until a step fails, then bisect between
// the last rate that passed and the first that failed. A step the proxy
// fails is run once more, and fails only if it fails again: one stall of a
// shared host (a single 10 ms pause in 2 s puts p99 over the budget at a
// few hundred streams a second) says nothing of what the proxy sustains.

// kneeBudget is the added TTFT p99 a rate may cost and still pass.
const kneeBudget = 10 * time.Millisecond

// kneeMaxLag is the share of a step the client may fall behind its schedule
// and still be said to have held the rate.
const kneeMaxLag = 0.05

// kneeStream is the knee's stream: 6 tokens 20 ms apart, mostly start cost.
// A start (accept, the request, a pooled upstream connection, headers, the
// first event, the close) costs a proxy 200–450 µs of CPU and an event
// 20–40 µs (the 1,000-stream rows of BENCHMARKS.md), so the six events are
// about a third of a stream's CPU; the 100 ms the stream stays open keep
// rate × 0.1 s streams in flight (200 at 2,000/s), as real streams are
// while the next ones start, without holding thousands of descriptors.
var kneeStream = clientConfig{Tokens: 6, Interval: 20 * time.Millisecond, Open: true, Reset: true}

// kneePlan is a ramp's rates and their length.
type kneePlan struct {
	start, top int           // streams per second: the first rate, and no step above it
	factor     float64       // each rate before the first failure: the last times this
	refine     int           // bisections between the last pass and the first failure
	step       time.Duration // each rate held this long
}

// kneeStep is one rate of a ramp: its direct and proxied runs, and the
// proxy's CPU over its run.
type kneeStep struct {
	rate            int // streams per second
	direct, proxied clientResult
	cpu, wall       time.Duration // the proxy's CPU, over wall time
	// firstAdded is the added TTFT p99 of a first try the proxy failed,
	// when this step is its second; 0 for a step passed at once.
	firstAdded time.Duration
}

// verdict is how a step ended.
type verdict int

const (
	passed     verdict = iota
	overBudget         // added TTFT p99 over kneeBudget
	proxyFails         // streams failed through the proxy
	rigLimit           // directly, the client and upstream could not hold the rate
)

// verdict judges a step. The rig cannot hold the rate when, directly, a
// stream failed, TTFT p99 alone passed the budget, or the client started
// its streams late (in either run: the client and upstream have CPU 1 to
// themselves in both).
func (p kneePlan) verdict(st kneeStep) verdict {
	late := time.Duration(kneeMaxLag * float64(p.step))
	switch {
	case st.direct.Errors > 0 || st.direct.ConnTTFTP99 > int64(kneeBudget) ||
		st.direct.StartLag > int64(late) || st.proxied.StartLag > int64(late):
		return rigLimit
	case st.proxied.Errors > 0:
		return proxyFails
	case st.added(99) > kneeBudget:
		return overBudget
	}
	return passed
}

// verdictText is a step's verdict as the tables say it.
func (p kneePlan) verdictText(st kneeStep) string {
	switch p.verdict(st) {
	case overBudget:
		return "added p99 over " + spaced(kneeBudget)
	case proxyFails:
		return fmt.Sprintf("%d errors through the proxy", st.proxied.Errors)
	case rigLimit:
		switch {
		case st.direct.Errors > 0:
			return fmt.Sprintf("the rig's limit: %d errors directly", st.direct.Errors)
		case st.direct.ConnTTFTP99 > int64(kneeBudget):
			return "the rig's limit: direct p99 over " + spaced(kneeBudget)
		}
		return fmt.Sprintf("the rig's limit: the client fell %s behind", spaced(time.Duration(max(st.direct.StartLag, st.proxied.StartLag)).Round(time.Millisecond)))
	}
	if st.firstAdded != 0 {
		return fmt.Sprintf("ok on a second try (the first: added p99 %.2f ms)", ms(int64(st.firstAdded)))
	}
	return "ok"
}

// retry reports a first try the proxy failed: the step is run once more.
func (p kneePlan) retry(st kneeStep) bool {
	v := p.verdict(st)
	return st.firstAdded == 0 && (v == overBudget || v == proxyFails)
}

// added is the step's added TTFT at percentile 50 or 99.
func (st kneeStep) added(p int) time.Duration {
	if p == 50 {
		return time.Duration(st.proxied.ConnTTFTP50 - st.direct.ConnTTFTP50)
	}
	return time.Duration(st.proxied.ConnTTFTP99 - st.direct.ConnTTFTP99)
}

// kneeResult is what a ramp found.
type kneeResult struct {
	// failed is the lowest rate the proxy failed (over budget, errors),
	// rig the lowest the rig could not hold; 0 for none.
	failed, rig int
	// rate is the highest rate that passed below failed (else below rig);
	// 0 when none did.
	rate int
}

// kneeOf reads a ramp's steps. A rate the rig could not hold between the
// last pass and the proxy's first failure (a bisection) says nothing of
// the knee.
func (p kneePlan) kneeOf(steps []kneeStep) kneeResult {
	var k kneeResult
	lowest := func(at *int, rate int) {
		if *at == 0 || rate < *at {
			*at = rate
		}
	}
	for _, st := range steps {
		switch p.verdict(st) {
		case overBudget, proxyFails:
			lowest(&k.failed, st.rate)
		case rigLimit:
			lowest(&k.rig, st.rate)
		}
	}
	ceiling := cmp.Or(k.failed, k.rig, math.MaxInt)
	for _, st := range steps {
		if st.rate < ceiling && p.verdict(st) == passed {
			k.rate = max(k.rate, st.rate)
		}
	}
	return k
}

// next returns the ramp's next rate, false when it is over: at the rig's
// limit, at the top, when the first rate failed, or after the bisections.
func (p kneePlan) next(steps []kneeStep) (int, bool) {
	if len(steps) == 0 {
		return p.start, true
	}
	k := p.kneeOf(steps)
	switch {
	case k.rig > 0:
		return 0, false
	case k.failed == 0:
		last := steps[len(steps)-1].rate
		if last >= p.top {
			return 0, false
		}
		return min(max(int(math.Round(float64(last)*p.factor)), last+1), p.top), true
	case k.rate == 0:
		return 0, false
	}
	first := slices.IndexFunc(steps, func(st kneeStep) bool { return p.verdict(st) != passed })
	if len(steps)-first-1 >= p.refine {
		return 0, false
	}
	mid := int(math.Round(math.Sqrt(float64(k.rate) * float64(k.failed))))
	if mid <= k.rate || mid >= k.failed {
		return 0, false
	}
	return mid, true
}

// String is the knee as the table shows it: the rate, or a bound on it
// when the ramp found no failure of the proxy's.
func (k kneeResult) String() string {
	switch {
	case k.failed > 0 && k.rate == 0:
		return fmt.Sprintf("< %s", thousands(k.failed))
	case k.failed > 0:
		return thousands(k.rate)
	case k.rig > 0 && k.rate == 0:
		return fmt.Sprintf("— (the rig's limit at %s)", thousands(k.rig))
	case k.rig > 0:
		return fmt.Sprintf("≥ %s (the rig's limit at %s)", thousands(k.rate), thousands(k.rig))
	}
	return fmt.Sprintf("≥ %s (the ramp's top)", thousands(k.rate))
}

// exact reports whether the knee is a rate, not a bound.
func (k kneeResult) exact() bool { return k.rate > 0 && k.failed > 0 }

// kneeRatio is head's knee over base's: a ratio when both are rates, a
// bound when one is a lower bound, "—" otherwise.
func kneeRatio(head, base kneeResult) string {
	if head.rate == 0 || base.rate == 0 {
		return "—"
	}
	r := float64(head.rate) / float64(base.rate)
	switch {
	case head.exact() && base.exact():
		return fmt.Sprintf("%.2f", r)
	case head.exact():
		return fmt.Sprintf("≤ %.2f", r)
	case base.exact():
		return fmt.Sprintf("≥ %.2f", r)
	}
	return "—"
}

// runKnee runs the knee workload: a ramp through each proxy, one fresh
// process for the whole ramp.
func (s *suite) runKnee(w workload) (workloadResult, error) {
	r := workloadResult{w: w, ramps: map[string][]kneeStep{}, names: s.names}
	fmt.Printf("== %s\n", w.label)
	for _, name := range s.names {
		steps, err := s.kneeRamp(w, name)
		if err != nil {
			return r, err
		}
		r.ramps[name] = steps
		fmt.Printf("  %s: the knee %s\n", name, w.knee.kneeOf(steps))
	}
	return r, nil
}

// kneeRamp runs one proxy's ramp: at each rate, directly, then through
// the proxy.
func (s *suite) kneeRamp(w workload, name string) ([]kneeStep, error) {
	p, addr, err := s.startProxy(name)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	var steps []kneeStep
	for {
		rate, ok := w.knee.next(steps)
		if !ok {
			return steps, nil
		}
		st, err := s.kneeRate(w, name, p, addr, rate)
		if err != nil {
			return steps, err
		}
		if w.knee.retry(st) {
			first := st.added(99)
			if st, err = s.kneeRate(w, name, p, addr, rate); err != nil {
				return steps, err
			}
			st.firstAdded = first
		}
		steps = append(steps, st)
	}
}

// kneeRate runs one rate, directly, then through the proxy p at addr.
func (s *suite) kneeRate(w workload, name string, p *proc, addr string, rate int) (kneeStep, error) {
	cfg := w.cfg
	cfg.Requests, cfg.Ramp = max(int(float64(rate)*w.knee.step.Seconds()), 1), w.knee.step
	st := kneeStep{rate: rate}
	var err error
	fmt.Printf("  %s/s direct\n", thousands(rate))
	if st.direct, err = s.client(cfg, s.upstream); err != nil {
		return st, err
	}
	before, err := readUsage(p.pid())
	if err != nil {
		return st, err
	}
	fmt.Printf("  %s/s through %s\n", thousands(rate), name)
	if st.proxied, err = s.client(cfg, addr); err != nil {
		return st, err
	}
	after, err := readUsage(p.pid())
	if err != nil {
		return st, fmt.Errorf("%s after %s/s: %w", name, thousands(rate), err)
	}
	st.cpu, st.wall = after.cpu-before.cpu, time.Duration(after.at-before.at)
	fmt.Printf("    added TTFT p99 %s (direct %s), proxy CPU %.0f%%: %s\n", st.added(99),
		time.Duration(st.direct.ConnTTFTP99), st.cpuShare()*100, w.knee.verdictText(st))
	return st, nil
}

// cpuShare is the proxy's CPU over its run, a share of one core.
func (st kneeStep) cpuShare() float64 {
	if st.wall <= 0 {
		return 0
	}
	return st.cpu.Seconds() / st.wall.Seconds()
}
