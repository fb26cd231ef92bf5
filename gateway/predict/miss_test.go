package predict

import (
	"testing"
	"time"
)

// TestCompare: the ratio of the totals and the part furthest off.
func TestCompare(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name                string
		predicted, measured Parts
		want                Miss
	}{
		{"exact", Parts{10 * ms, 0, 50 * ms}, Parts{10 * ms, 0, 50 * ms}, Miss{Ratio: 1}},
		{"queue longer than predicted", Parts{10 * ms, 0, 50 * ms}, Parts{70 * ms, 0, 50 * ms}, Miss{Ratio: 0.5, Part: Queue, By: -60 * ms}},
		{"prefill shorter", Parts{10 * ms, 0, 90 * ms}, Parts{20 * ms, 0, 30 * ms}, Miss{Ratio: 2, Part: Prefill, By: 60 * ms}},
		// An unsplit prediction against a split measurement: the engine's
		// time predicted whole in Unattributed.
		{"unsplit against split", Parts{Unattributed: 100 * ms}, Parts{Prefill: 80 * ms, FirstDecode: 20 * ms}, Miss{Ratio: 1, Part: Unattributed, By: 100 * ms}},
		{"nothing measured", Parts{Queue: ms}, Parts{}, Miss{Part: Queue, By: ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compare(tc.predicted, tc.measured); got != tc.want {
				t.Fatalf("Compare = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPartNames: the parts are named as the stages.
func TestPartNames(t *testing.T) {
	var got []string
	for p := range NumParts + 1 {
		got = append(got, p.String())
	}
	want := []string{"queue", "preparation", "prefill", "first_decode", "unattributed", "transport", "part?"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("names %q, want %q", got, want)
		}
	}
}
