package predict

import (
	"testing"
	"time"
)

// TestOverrun: the factor is the nearest-rank 90th percentile of
// measured over predicted over the latest overrunWindow (of fewer than
// ten, the largest), never below 1, and 1 before any; requests with
// nothing predicted or measured are ignored.
func TestOverrun(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tt := range []struct {
		name   string
		ratios []float64 // measured over a 100 ms prediction; 0: nothing measured
		want   float64
	}{
		{"none", nil, 1},
		{"one", []float64{1.3}, 1.3},
		{"fewer than ten: the largest", []float64{1.1, 3, 1.2, 1, 1, 1, 1, 1, 1}, 3},
		{"ten", []float64{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 3}, 1.8},
		{"twenty", []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2.5, 2, 4}, 2},
		{"early", []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0.5, 0.6, 0.7, 0.8, 0.9}, 1},
		{"nothing measured is no request", []float64{0, 0}, 1},
		{"the window forgets", append([]float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 9},
			1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2,
			1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2), 1.2},
		{"nine of 32 slow", append([]float64{2, 2, 2, 2, 2, 2, 2, 2, 2},
			1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), 2},
	} {
		var o Overrun
		for _, r := range tt.ratios {
			o.Observe(100*time.Millisecond, ms(100*r))
		}
		if got := o.Factor(); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("%s: factor %v, want %v", tt.name, got, tt.want)
		}
		if got, want := o.Bound(time.Second, 1), time.Duration(tt.want*float64(time.Second)); got < want-time.Microsecond || got > want+time.Microsecond {
			t.Errorf("%s: bound of 1 s %v, want %v", tt.name, got, want)
		}
	}
	// Until it is Known, an Overrun is held to the prior where that is
	// higher.
	var few, ten Overrun
	for i := range 10 {
		if i < 3 {
			few.Observe(100*time.Millisecond, 130*time.Millisecond)
		}
		ten.Observe(100*time.Millisecond, 120*time.Millisecond)
	}
	for _, tt := range []struct {
		name  string
		o     *Overrun
		prior float64
		want  time.Duration
	}{
		{"three, a higher prior", &few, 2, 2 * time.Second},
		{"three, a lower prior", &few, 1.1, 1300 * time.Millisecond},
		{"ten, a higher prior", &ten, 2, 1200 * time.Millisecond},
	} {
		if got := tt.o.Bound(time.Second, tt.prior); got < tt.want-time.Microsecond || got > tt.want+time.Microsecond {
			t.Errorf("%s: bound of 1 s %v, want %v (known %v)", tt.name, got, tt.want, tt.o.Known())
		}
	}
	var o Overrun
	o.Observe(0, time.Second)
	if o.n != 0 {
		t.Error("a request with nothing predicted was taken")
	}
}
