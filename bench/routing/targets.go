package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
)

// The targets least_ttft is held to (BENCHMARKS.md, "Routing for the
// first token"), each read from one seed's runs.
const (
	targetP99Cut   = 0.30 // TTFT p99 at least this share below least_load's
	targetHitRatio = 2.0  // the prefix-cache hit share at least this many times least_load's
	targetErrP50   = 0.20 // the prediction error p50 at most this
)

// seedTargets are one seed's figures the targets are judged on.
type seedTargets struct {
	seed uint64
	// complete says least_load and least_ttft each completed a request:
	// a seed without is shown, and meets no target.
	complete         bool
	loadP99, ttftP99 time.Duration
	loadHit, ttftHit float64
	// ceiling is the most of least_ttft's prompt tokens any routing could
	// have had cached (policyResult.hitCeiling).
	ceiling float64
	// predicted is how many least_ttft requests had a prediction, and
	// errP50 and errP90 their error's percentiles.
	predicted      int
	errP50, errP90 float64
	// held says the SLO run ran: its requests and those refused; the
	// requests its slow engine served; of those routed there with a
	// prediction, how many passed the SLO and the latest by how much (a
	// share of the SLO); heldP90 is that run's prediction error p90, what
	// the latest may pass the SLO by.
	held                   bool
	heldRequests, refused  int
	slowServed, slowMissed int
	slowWorst, heldP90     float64
}

// targetsOf reads a seed's report.
func targetsOf(r *report) seedTargets {
	var load, ttft *policyResult
	for i := range r.results {
		switch res := &r.results[i]; {
		case res.requests == res.errors:
		case res.policy == gateway.PolicyLeastLoad:
			load = res
		case res.policy == gateway.PolicyLeastTTFT:
			ttft = res
		}
	}
	if load == nil || ttft == nil {
		return seedTargets{seed: r.seed}
	}
	t := seedTargets{seed: r.seed, complete: true, loadP99: load.ttftP99, ttftP99: ttft.ttftP99, loadHit: load.hitShare(), ttftHit: ttft.hitShare(),
		ceiling: ttft.hitCeiling(), predicted: ttft.predicted, errP50: ttft.errP50, errP90: ttft.errP90}
	if h := r.held; h != nil {
		slow := len(h.perEngine) - 1
		t.held, t.heldP90, t.heldRequests, t.refused = true, h.errP90, h.requests, h.refused
		t.slowServed, t.slowMissed, t.slowWorst = h.perEngine[slow], h.sloMissed[slow], h.worstMiss[slow]
	}
	return t
}

func (t *seedTargets) p99Change() float64 {
	if t.loadP99 <= 0 {
		return 0
	}
	return float64(t.ttftP99-t.loadP99) / float64(t.loadP99)
}

func (t *seedTargets) hitRatio() float64 {
	if t.loadHit == 0 {
		return 0
	}
	return t.ttftHit / t.loadHit
}

// The verdicts: a seed without a complete request under either policy
// meets none; an SLO run that refused every request shows nothing, and
// does not meet its target either.
func (t *seedTargets) p99Met() bool { return t.complete && -t.p99Change() >= targetP99Cut }
func (t *seedTargets) hitMet() bool { return t.complete && t.hitRatio() >= targetHitRatio }
func (t *seedTargets) errMet() bool {
	return t.complete && t.predicted > 0 && t.errP50 <= targetErrP50
}
func (t *seedTargets) sloMet() bool {
	return t.complete && t.held && !t.refusedAll() && (t.slowMissed == 0 || t.slowWorst <= t.heldP90)
}

// hitOutOfReach says the hit share target, not met, asked more than any
// routing could have had cached: least_load's share times the ratio past
// the ceiling.
func (t *seedTargets) hitOutOfReach() bool {
	return t.complete && !t.hitMet() && t.ceiling > 0 && targetHitRatio*t.loadHit > t.ceiling
}

// refusedAll says the SLO run refused every request it measured.
func (t *seedTargets) refusedAll() bool { return t.held && t.refused >= t.heldRequests }

// writeTargets prints each seed's figures, their medians, and how many
// seeds met each target: a run is one draw of a spread the investigation
// measured at twenty points of hit share for one seed and code, so the
// targets are read over several.
func writeTargets(w io.Writer, ts []seedTargets) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprint(w, "\nThe targets (BENCHMARKS.md), `least_ttft` against `least_load`, seed by seed, each seed at the rate calibrated once on the first one's workload. "+
		"The most any routing could have had cached: each measured request served the full blocks its prompt shares with a prompt sent before it (one cache that evicts nothing, every earlier prompt computed by then). "+
		"Each figure a target reads is rounded away from the target, so that a seed that missed it never shows the target's figure (a hit share ratio of 1.998 shows as 1.99×).\n\n"+
		"| seed | `least_load` TTFT p99 | `least_ttft` TTFT p99 | `least_load` hit share | `least_ttft` hit share (against `least_load`'s; the most any routing could) | prediction error p50 / p90 | held to the SLO: refused; the slow engine served, past the SLO, the latest; the error p90 |\n"+
		"| --- | --- | --- | --- | --- | --- | --- |\n")
	for i := range ts {
		t := &ts[i]
		if !t.complete {
			fmt.Fprintf(w, "| %d | no complete request under `least_load` or `least_ttft` | | | | | |\n", t.seed)
			continue
		}
		errs := "—"
		if t.predicted > 0 {
			errs = fmt.Sprintf("%.0f %% / %.0f %%", 100*shown(t.errP50, 2, up), 100*t.errP90)
		}
		fmt.Fprintf(w, "| %d | %s | %s (%s) | %.1f %% | %.1f %% (%.2f×; %s) | %s | %s |\n", t.seed,
			ms(t.loadP99), ms(t.ttftP99), signedPct(shown(t.p99Change(), 2, towardZero)), 100*t.loadHit, 100*t.ttftHit, shown(t.hitRatio(), 2, down), t.ceilingText(), errs, t.heldText())
	}
	// med is the median of f over the seeds that keep says count.
	med := func(f func(t *seedTargets) float64, keep func(t *seedTargets) bool) float64 {
		var v []float64
		for i := range ts {
			if keep(&ts[i]) {
				v = append(v, f(&ts[i]))
			}
		}
		slices.Sort(v)
		switch n := len(v); {
		case n == 0:
			return math.NaN()
		case n%2 == 0:
			return (v[n/2-1] + v[n/2]) / 2
		default:
			return v[n/2]
		}
	}
	complete := func(t *seedTargets) bool { return t.complete }
	count := func(f func(t *seedTargets) bool) (n int) {
		for i := range ts {
			if f(&ts[i]) {
				n++
			}
		}
		return n
	}
	fmt.Fprint(w, "\n| target | seeds that met it | the median over the seeds |\n| --- | --- | --- |\n")
	fmt.Fprintf(w, "| TTFT p99 at least %.0f %% below `least_load`'s | %d of %d | %s |\n",
		100*targetP99Cut, count((*seedTargets).p99Met), len(ts), signedPct(shown(med((*seedTargets).p99Change, complete), 2, towardZero)))
	fmt.Fprintf(w, "| prefix-cache hit share at least %g× `least_load`'s | %d of %d%s | %.2f× |\n",
		targetHitRatio, count((*seedTargets).hitMet), len(ts), outOfReachText(count((*seedTargets).hitOutOfReach)), shown(med((*seedTargets).hitRatio, complete), 2, down))
	errP50 := "—"
	if v := med(func(t *seedTargets) float64 { return t.errP50 }, func(t *seedTargets) bool { return t.complete && t.predicted > 0 }); !math.IsNaN(v) {
		errP50 = fmt.Sprintf("%.1f %%", 100*shown(v, 3, up))
	}
	fmt.Fprintf(w, "| prediction error p50 at most %.0f %% (a seed without predictions misses it) | %d of %d | %s |\n",
		100*targetErrP50, count((*seedTargets).errMet), len(ts), errP50)
	if held := count(func(t *seedTargets) bool { return t.held }); held > 0 {
		fmt.Fprintf(w, "| held to an SLO below the slow engine's TTFT, none it served past the SLO by more than the prediction error p90 (an SLO run that refused every request does not meet it) | %d of %d%s | — |\n",
			count((*seedTargets).sloMet), held, refusedAllText(count((*seedTargets).refusedAll)))
	}
}

// outOfReachText says in how many seeds the hit share target was out of
// reach, if in any.
func outOfReachText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (out of reach in %d: %g× `least_load`'s share was more than any routing could have cached)", n, targetHitRatio)
}

// ceilingText is the most any routing could have had cached: — when not
// known.
func (t *seedTargets) ceilingText() string {
	if t.ceiling <= 0 {
		return "—"
	}
	return fmt.Sprintf("at most %.1f %%", 100*t.ceiling)
}

// refusedAllText says how many SLO runs refused every request, if any did.
func refusedAllText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d refused every request)", n)
}

// heldText is the SLO run's column: — when none ran.
func (t *seedTargets) heldText() string {
	if !t.held {
		return "—"
	}
	if t.refusedAll() {
		return fmt.Sprintf("refused all %d", t.heldRequests)
	}
	latest := "—"
	if t.slowMissed > 0 {
		latest = fmt.Sprintf("+%.0f %%", 100*shown(t.slowWorst, 2, up))
	}
	return fmt.Sprintf("%d of %d refused; %d, %d, %s; %.0f %%", t.refused, t.heldRequests, t.slowServed, t.slowMissed, latest, 100*shown(t.heldP90, 2, down))
}

// The ways shown rounds.
const (
	down       = -1
	towardZero = 0
	up         = 1
)

// shown is v, a figure a target reads, rounded to places decimals (of v,
// not of its percentage) the way dir says, away from the target's side:
// the hit share's ratio down, a p99's change toward zero (a cut shows
// smaller), the error p50 and a miss past the SLO up, the error p90 a
// miss is held to down. A seed that missed a target then never shows its
// figure (a ratio of 1.998 shows as 1.99×, not 2.00×). A millionth of the
// last place is allowed for float error (0.2 is 20.000000000000004 %).
func shown(v float64, places, dir int) float64 {
	p := math.Pow10(places)
	x := v * p
	switch dir {
	case down:
		x = math.Floor(x + 1e-6)
	case up:
		x = math.Ceil(x - 1e-6)
	default:
		x = math.Trunc(x + math.Copysign(1e-6, x))
	}
	return x / p
}

// signedPct renders a change as a signed percentage, a minus sign for a fall.
func signedPct(v float64) string {
	if v < 0 {
		return fmt.Sprintf("−%.0f %%", -100*v)
	}
	return fmt.Sprintf("+%.0f %%", 100*v)
}
