package main

import (
	"slices"
	"testing"
	"time"
)

var testPlan = kneePlan{start: 250, top: 8000, factor: 1.25, refine: 2, step: 2 * time.Second}

// step is a step at rate whose direct and proxied runs had these TTFT p99s
// and no errors, on schedule.
func step(rate int, direct, proxied time.Duration) kneeStep {
	return kneeStep{rate: rate,
		direct:  clientResult{OK: 1, ConnTTFTP50: int64(direct) / 4, ConnTTFTP99: int64(direct)},
		proxied: clientResult{OK: 1, ConnTTFTP50: int64(proxied) / 4, ConnTTFTP99: int64(proxied)},
		cpu:     time.Duration(rate) * 300 * time.Microsecond, wall: time.Second}
}

// runRamp runs plan's ramp against a model of the proxy and the rig: the
// step each rate would measure.
func runRamp(plan kneePlan, model func(rate int) kneeStep) []kneeStep {
	var steps []kneeStep
	for len(steps) < 100 {
		rate, ok := plan.next(steps)
		if !ok {
			break
		}
		steps = append(steps, model(rate))
	}
	return steps
}

func TestKneeVerdict(t *testing.T) {
	ms := time.Millisecond
	with := func(st kneeStep, f func(*kneeStep)) kneeStep { f(&st); return st }
	tests := []struct {
		name string
		st   kneeStep
		want verdict
	}{
		{"well within", step(500, 2*ms, 3*ms), passed},
		{"added p99 at the budget", step(500, 2*ms, 12*ms), passed},
		{"added p99 over the budget", step(500, 2*ms, 12*ms+1), overBudget},
		{"faster through the proxy", step(500, 5*ms, 3*ms), passed},
		{"errors through the proxy", with(step(500, 2*ms, 3*ms), func(st *kneeStep) { st.proxied.Errors = 1 }), proxyFails},
		{"errors and over budget", with(step(500, 2*ms, 30*ms), func(st *kneeStep) { st.proxied.Errors = 1 }), proxyFails},
		{"errors directly", with(step(500, 2*ms, 30*ms), func(st *kneeStep) { st.direct.Errors = 1 }), rigLimit},
		{"direct p99 over the budget", step(500, 11*ms, 30*ms), rigLimit},
		{"direct p99 at the budget", step(500, 10*ms, 12*ms), passed},
		{"the client late directly", with(step(500, 2*ms, 3*ms), func(st *kneeStep) { st.direct.StartLag = int64(100*ms + 1) }), rigLimit},
		{"the client late through the proxy", with(step(500, 2*ms, 3*ms), func(st *kneeStep) { st.proxied.StartLag = int64(100*ms + 1) }), rigLimit},
		{"the client a little late", with(step(500, 2*ms, 3*ms), func(st *kneeStep) { st.proxied.StartLag = int64(100 * ms) }), passed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testPlan.verdict(tt.st); got != tt.want {
				t.Errorf("verdict = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestKneeRamp drives a ramp against a model of a proxy and a rig and
// checks the rates it steps through and the knee it reports.
func TestKneeRamp(t *testing.T) {
	ms := time.Millisecond
	coarse := []int{250, 313, 391, 489, 611, 764, 955, 1194, 1493, 1866, 2333, 2916, 3645, 4556, 5695, 7119, 8000}
	tests := []struct {
		name string
		plan kneePlan
		// The model: the proxy adds 20 ms above knee (0: never) and fails
		// streams from errorsAt; the rig cannot hold rigAt (0: any) and
		// stumbles once at noiseAt.
		knee, errorsAt, rigAt, noiseAt int
		rates                          []int
		want                           kneeResult
		shown                          string
	}{
		{name: "a knee, then two bisections", plan: testPlan, knee: 1000,
			rates: append(slices.Clone(coarse[:8]), 1068, 1010),
			want:  kneeResult{failed: 1010, rate: 955}, shown: "955"},
		{name: "a bisection passes", plan: testPlan, knee: 1050,
			rates: append(slices.Clone(coarse[:8]), 1068, 1010),
			want:  kneeResult{failed: 1068, rate: 1010}, shown: "1,010"},
		{name: "errors", plan: testPlan, errorsAt: 600,
			rates: append(slices.Clone(coarse[:5]), 547, 578),
			want:  kneeResult{failed: 611, rate: 578}, shown: "578"},
		{name: "the first rate fails", plan: testPlan, knee: 100,
			rates: []int{250},
			want:  kneeResult{failed: 250}, shown: "< 250"},
		{name: "the rig's limit", plan: testPlan, rigAt: 2000,
			rates: coarse[:11],
			want:  kneeResult{rig: 2333, rate: 1866}, shown: "≥ 1,866 (the rig's limit at 2,333)"},
		{name: "the rig's limit at the first rate", plan: testPlan, rigAt: 1,
			rates: []int{250},
			want:  kneeResult{rig: 250}, shown: "— (the rig's limit at 250)"},
		{name: "the rig stumbles in a bisection", plan: testPlan, knee: 1000, noiseAt: 1068,
			rates: append(slices.Clone(coarse[:8]), 1068),
			want:  kneeResult{failed: 1194, rig: 1068, rate: 955}, shown: "955"},
		{name: "the top", plan: testPlan,
			rates: coarse,
			want:  kneeResult{rate: 8000}, shown: "≥ 8,000 (the ramp's top)"},
		{name: "no bisections", plan: kneePlan{start: 250, top: 1000, factor: 2}, knee: 600,
			rates: []int{250, 500, 1000},
			want:  kneeResult{failed: 1000, rate: 500}, shown: "500"},
		{name: "bisections meet", plan: kneePlan{start: 10, top: 100, factor: 1.25, refine: 5}, knee: 12,
			rates: []int{10, 13, 11, 12},
			want:  kneeResult{failed: 13, rate: 12}, shown: "12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := runRamp(tt.plan, func(rate int) kneeStep {
				direct, proxied := 2*ms, 3*ms
				if tt.knee > 0 && rate > tt.knee {
					proxied += 20 * ms
				}
				if (tt.rigAt > 0 && rate >= tt.rigAt) || rate == tt.noiseAt {
					direct = 11 * ms
				}
				st := step(rate, direct, proxied)
				if tt.errorsAt > 0 && rate >= tt.errorsAt {
					st.proxied.Errors = 3
				}
				return st
			})
			var rates []int
			for _, st := range steps {
				rates = append(rates, st.rate)
			}
			if !slices.Equal(rates, tt.rates) {
				t.Errorf("rates %v, want %v", rates, tt.rates)
			}
			k := tt.plan.kneeOf(steps)
			if k != tt.want {
				t.Errorf("knee %+v, want %+v", k, tt.want)
			}
			if got := k.String(); got != tt.shown {
				t.Errorf("shown %q, want %q", got, tt.shown)
			}
		})
	}
}

func TestKneeRatio(t *testing.T) {
	exact := func(rate int) kneeResult { return kneeResult{rate: rate, failed: rate + 100} }
	tests := []struct {
		name       string
		head, base kneeResult
		want       string
	}{
		{"both rates", exact(1200), exact(2000), "0.60"},
		{"the base a lower bound", exact(1200), kneeResult{rate: 2000, rig: 2500}, "≤ 0.60"},
		{"the head a lower bound", kneeResult{rate: 8000}, exact(4000), "≥ 2.00"},
		{"both lower bounds", kneeResult{rate: 1200, rig: 1500}, kneeResult{rate: 2000, rig: 2500}, "—"},
		{"the head below the first rate", kneeResult{failed: 250}, exact(2000), "—"},
		{"the base at the rig's limit at once", exact(1200), kneeResult{rig: 250}, "—"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kneeRatio(tt.head, tt.base); got != tt.want {
				t.Errorf("kneeRatio = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKneeRetry: a step the proxy fails is run once more, once; the rig's
// limit and a pass are not; a second try that passes says so.
func TestKneeRetry(t *testing.T) {
	ms := time.Millisecond
	over, rig := step(500, 2*ms, 30*ms), step(500, 11*ms, 30*ms)
	second := step(500, 2*ms, 3*ms)
	second.firstAdded = 28 * ms
	failedAgain := over
	failedAgain.firstAdded = 28 * ms
	for _, tc := range []struct {
		name string
		st   kneeStep
		want bool
	}{
		{"a first try over the budget", over, true},
		{"a first try with errors", func() kneeStep { st := step(500, 2*ms, 3*ms); st.proxied.Errors = 1; return st }(), true},
		{"the rig's limit", rig, false},
		{"a pass", step(500, 2*ms, 3*ms), false},
		{"a second try that failed", failedAgain, false},
	} {
		if got := testPlan.retry(tc.st); got != tc.want {
			t.Errorf("%s: retry %v, want %v", tc.name, got, tc.want)
		}
	}
	if got, want := testPlan.verdictText(second), "ok on a second try (the first: added p99 28.00 ms)"; got != want {
		t.Errorf("verdict %q, want %q", got, want)
	}
}
