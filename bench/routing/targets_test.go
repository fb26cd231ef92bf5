package main

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// seedReport is a seed's report with least_load and least_ttft and, when
// held, an SLO run whose slow engine served 20, 2 of them past the SLO by
// at most worst, at a prediction error p90 of 0.34.
func seedReport(seed uint64, loadP99, ttftP99 time.Duration, loadCached, ttftCached int, errP50 float64, worst float64) report {
	r := baseReport()
	r.seed = seed
	ttft := result("least_ttft", 60*time.Millisecond, ttftP99, ttftCached, 0, 50*time.Millisecond, 200, 150, 48)
	ttft.predicted, ttft.errP50, ttft.errP90 = 390, errP50, 0.9
	ttft.ceilingTokens = 400 * 1420
	r.results = []policyResult{
		result("round_robin", 900*time.Millisecond, 9*time.Second, 400*300, time.Second, time.Second, 134, 133, 131),
		result("least_load", 700*time.Millisecond, loadP99, loadCached, time.Second, time.Second, 150, 148, 100),
		ttft,
	}
	if worst >= 0 {
		held := ttft
		held.refused = 325
		held.errP90, held.perEngine, held.unpredicted = 0.34, []int{30, 25, 20}, []int{1, 0, 2}
		held.sloMissed, held.worstMiss = []int{1, 0, 0}, []float64{0.9, 0, 0}
		if worst > 0 {
			held.sloMissed[2], held.worstMiss[2] = 2, worst
		}
		r.held = &held
	}
	return r
}

func TestTargetsOf(t *testing.T) {
	r := seedReport(4, 10*time.Second, 2500*time.Millisecond, 400*500, 400*1200, 0.27, 0.5)
	want := seedTargets{seed: 4, complete: true, loadP99: 10 * time.Second, ttftP99: 2500 * time.Millisecond, loadHit: 500.0 / 1480, ttftHit: 1200.0 / 1480,
		ceiling: 1420.0 / 1480, predicted: 390, errP50: 0.27, errP90: 0.9, held: true, heldRequests: 400, refused: 325, slowServed: 20, slowMissed: 2, slowWorst: 0.5, heldP90: 0.34}
	if got := targetsOf(&r); got != want {
		t.Errorf("targetsOf = %+v, want %+v", got, want)
	}
	r.results = r.results[:2] // no least_ttft
	if got := targetsOf(&r); got.complete {
		t.Errorf("complete without least_ttft: %+v", got)
	}
	r = seedReport(4, 10*time.Second, 2500*time.Millisecond, 400*500, 400*1200, 0.27, -1)
	r.results[1].errors = r.results[1].requests // least_load completed nothing
	got := targetsOf(&r)
	if got.complete {
		t.Errorf("complete without a complete least_load request: %+v", got)
	}
	if got.p99Met() || got.hitMet() || got.errMet() || got.sloMet() {
		t.Errorf("an incomplete seed met a target: %+v", got)
	}
}

func TestVerdicts(t *testing.T) {
	base := seedTargets{complete: true, loadP99: 10 * time.Second, ttftP99: 7 * time.Second, loadHit: 0.4, ttftHit: 0.8, predicted: 200, errP50: 0.2,
		held: true, heldRequests: 300, refused: 200, slowMissed: 2, slowWorst: 0.34, heldP90: 0.34}
	tests := []struct {
		name                  string
		edit                  func(t *seedTargets)
		p99, hit, errP50, slo bool
		outOfReach            bool
	}{
		{"each at its bound", func(*seedTargets) {}, true, true, true, true, false},
		{"p99 cut 29 %", func(t *seedTargets) { t.ttftP99 = 7100 * time.Millisecond }, false, true, true, true, false},
		{"hit share 1.95x", func(t *seedTargets) { t.ttftHit = 0.78 }, true, false, true, true, false},
		{"error p50 21 %", func(t *seedTargets) { t.errP50 = 0.21 }, true, true, false, true, false},
		{"no prediction", func(t *seedTargets) { t.predicted, t.errP50 = 0, 0 }, true, true, false, true, false},
		{"the latest past the SLO by more than the p90", func(t *seedTargets) { t.slowWorst = 0.5 }, true, true, true, false, false},
		{"none past the SLO", func(t *seedTargets) { t.slowMissed, t.slowWorst = 0, 0 }, true, true, true, true, false},
		{"every request refused", func(t *seedTargets) { t.refused = t.heldRequests }, true, true, true, false, false},
		{"no SLO run", func(t *seedTargets) { t.held = false }, true, true, true, false, false},
		{"within the ceiling", func(t *seedTargets) { t.ceiling = 0.8 }, true, true, true, true, false},
		{"twice least_load's past the ceiling", func(t *seedTargets) { t.ttftHit, t.ceiling = 0.79, 0.79 }, true, false, true, true, true},
		{"no ceiling known", func(t *seedTargets) { t.ttftHit, t.ceiling = 0.79, 0 }, true, false, true, true, false},
		{"met, with the ceiling below twice least_load's", func(t *seedTargets) { t.ceiling = 0.79 }, true, true, true, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.edit(&s)
			if got := [4]bool{s.p99Met(), s.hitMet(), s.errMet(), s.sloMet()}; got != [4]bool{tc.p99, tc.hit, tc.errP50, tc.slo} {
				t.Errorf("met (p99, hit share, error, SLO) = %v, want %v", got, [4]bool{tc.p99, tc.hit, tc.errP50, tc.slo})
			}
			if got := s.hitOutOfReach(); got != tc.outOfReach {
				t.Errorf("hit share target out of reach = %v, want %v", got, tc.outOfReach)
			}
		})
	}
}

func TestWriteTargets(t *testing.T) {
	var ts []seedTargets
	for _, r := range []report{
		seedReport(1, 12*time.Second, 760*time.Millisecond, 400*520, 400*1420, 0.21, 0),
		seedReport(2, 8*time.Second, 3400*time.Millisecond, 400*610, 400*1060, 0.41, 0.5),
		seedReport(3, 10*time.Second, 2500*time.Millisecond, 400*550, 400*1260, 0.17, 0.2),
		seedReport(4, 9*time.Second, 1*time.Second, 400*560, 400*1400, 0.18, -1),
		seedReport(5, 9*time.Second, 1*time.Second, 400*560, 400*1400, 0, -1),
	} {
		ts = append(ts, targetsOf(&r))
	}
	ts[1].ceiling = 1.9 * ts[1].loadHit                            // twice least_load's was out of reach
	ts[4].predicted = 0                                            // its error p50 is left out of the median
	ts[3].held, ts[3].heldRequests, ts[3].refused = true, 400, 400 // refused all: not met
	ts = append(ts, seedTargets{seed: 6})                          // least_ttft completed nothing: a miss everywhere
	short := seedReport(7, 10*time.Second, 7001*time.Millisecond, 400*500, 399600, 0.2004, 0.3401)
	ts = append(ts, targetsOf(&short)) // each a hair short: 1.998×, a 29.99 % cut, 20.04 %, +34.01 % against 34 %
	var b bytes.Buffer
	writeTargets(&b, ts)
	golden(t, "targets", b.String())

	b.Reset()
	writeTargets(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no seed printed %q", b.String())
	}
}

// TestShown: a figure a target reads is rounded away from the target,
// float error aside: a seed that missed never shows the target's figure.
func TestShown(t *testing.T) {
	for _, tt := range []struct {
		v      float64
		places int
		dir    int
		want   float64
	}{
		{1.998, 2, down, 1.99},
		{2, 2, down, 2},
		{0.8 / 0.4, 2, down, 2},
		{0.2004, 2, up, 0.21},
		{0.2, 2, up, 0.2},
		{0.2004, 3, up, 0.201},
		{-0.2999, 2, towardZero, -0.29},
		{7.0/10 - 1, 2, towardZero, -0.3},
		{0.354, 2, towardZero, 0.35},
	} {
		if got := shown(tt.v, tt.places, tt.dir); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("shown(%v, %d, %d) = %v, want %v", tt.v, tt.places, tt.dir, got, tt.want)
		}
	}
}
