package predict

import (
	"math"
	"testing"
)

// TestFitLine: the line solved from equal-weight observations, its
// degenerate cases, and the outlier rule.
func TestFitLine(t *testing.T) {
	type pt struct{ x, y float64 }
	for _, tc := range []struct {
		name string
		seen []pt
		a, b float64
	}{
		{"a line", []pt{{100, 20}, {200, 30}, {300, 40}}, 10, 0.1},
		{"one x: proportional", []pt{{100, 20}, {100, 30}}, 0, 0.25},
		{"x zero: the mean", []pt{{0, 20}, {0, 30}}, 25, 0},
		{"falling: the mean", []pt{{100, 30}, {200, 20}}, 25, 0},
		// Below the axis at x = 0: kept (a knee), read as zero there (at).
		{"negative intercept", []pt{{2, 0}, {4, 20}}, -20, 10},
		// Once warm, one far observation is taken as the bound ...
		{"one outlier", []pt{{0, 10}, {0, 10}, {0, 10}, {0, 10}, {0, 100}}, 10.5, 0},
		// ... and the next in its direction believed.
		{"two in a row", []pt{{0, 10}, {0, 10}, {0, 10}, {0, 10}, {0, 100}, {0, 100}}, (40 + 12.5 + 100) / 6, 0},
		// A near one between them starts the rule over: the second is
		// taken as its bound too, 3 × the mean residual so far (3 / 6)
		// and a quarter of the line.
		{"two apart", []pt{{0, 10}, {0, 10}, {0, 10}, {0, 10}, {0, 100}, {0, 10}, {0, 100}}, (62.5 + 62.5/6 + 3*3.0/6 + 0.25*62.5/6) / 7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f fit
			for _, p := range tc.seen {
				f.add(1, p.x, p.y)
			}
			if math.Abs(f.a-tc.a) > 1e-9 || math.Abs(f.b-tc.b) > 1e-9 {
				t.Fatalf("line %v + %v·x, want %v + %v·x", f.a, f.b, tc.a, tc.b)
			}
		})
	}
}

// TestFitCosted: a costed line (a prompt's cost) whose best fit starts
// below zero is the best one through the origin instead: fitted across a
// slowdown (fast at small prompts, slow at larger ones), kept below the
// axis, it would predict nothing for the small prompts.
func TestFitCosted(t *testing.T) {
	f := fit{costed: true}
	f.add(1, 262, 50)
	f.add(1, 343, 2500)
	if want := (262*50 + 343*2500) / (262.0*262 + 343*343); f.a != 0 || math.Abs(f.b-want) > 1e-9 {
		t.Fatalf("line %v + %v·x, want 0 + %v·x", f.a, f.b, want)
	}
	if f.at(262) <= 0 {
		t.Fatalf("a small prompt predicted %v", f.at(262))
	}
}

// TestFitCostedFalling: a proportional line whose observations fall as x
// grows (two misses, the longer prompt the faster) is the best line
// through the origin, not their mean: a prompt of a few tokens is
// predicted a few tokens' cost, not a whole prompt's. A costed line that
// is not proportional (a hit's cost, mostly its fixed part) keeps the mean.
func TestFitCostedFalling(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    fit
		a, b float64
	}{
		{"proportional", fit{costed: true, proportional: true}, 0, (1200*1300 + 1800*1200) / (1200.0*1200 + 1800*1800)},
		{"costed", fit{costed: true}, 1250, 0},
	} {
		f := tc.f
		f.add(1, 1200, 1300)
		f.add(1, 1800, 1200)
		if math.Abs(f.a-tc.a) > 1e-9 || math.Abs(f.b-tc.b) > 1e-9 {
			t.Errorf("%s: line %v + %v·x, want %v + %v·x", tc.name, f.a, f.b, tc.a, tc.b)
		}
	}
}
