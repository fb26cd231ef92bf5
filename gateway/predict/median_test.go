package predict

import "testing"

// TestWindowMedian: the median is the least value holding half the weight
// at or below it, over the newest windowSize observations only.
func TestWindowMedian(t *testing.T) {
	type obs struct{ w, v float64 }
	many := make([]obs, 0, windowSize+4)
	for range 4 {
		many = append(many, obs{1, 100}) // pushed out by the 16 after
	}
	for i := range windowSize {
		many = append(many, obs{1, float64(i % 2)})
	}
	for _, tc := range []struct {
		name  string
		seen  []obs
		decay float64 // applied after the first observation, when not 0
		want  float64
	}{
		{"none", nil, 0, 0},
		{"one", []obs{{1, 7}}, 0, 7},
		{"odd", []obs{{1, 3}, {1, 1}, {1, 2}}, 0, 2},
		{"the tail does not pull it", []obs{{1, 1}, {1, 1}, {1, 1}, {1, 50}, {1, 90}}, 0, 1},
		{"even: the lower", []obs{{1, 4}, {1, 2}}, 0, 2},
		{"weighted", []obs{{1, 1}, {3, 9}}, 0, 9},
		{"decayed: the old one counts less", []obs{{1, 1}, {1, 9}}, 0.5, 9},
		{"only the newest windowSize", many, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q window
			for i, o := range tc.seen {
				if i == 1 && tc.decay != 0 {
					q.decay(tc.decay)
				}
				q.add(o.w, o.v)
			}
			if got := q.median(); got != tc.want {
				t.Fatalf("median %v, want %v", got, tc.want)
			}
		})
	}
}
