package exporters

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestDurationHistMatchesClientGolang feeds the same durations, in
// batches the size of a record's, to a durationVec child and, one by one,
// to a client_golang histogram of the same options, and holds the two
// expositions equal: classic buckets, count, native schema, zero bucket,
// spans and deltas (the sum to rounding: a batch sums in nanoseconds).
func TestDurationHistMatchesClientGolang(t *testing.T) {
	tests := []struct {
		name        string
		buckets     []float64
		classicOnly bool
		lo, hi      time.Duration // log-uniform range of the values
	}{
		{"gaps", TokenBuckets, false, time.Millisecond, 2 * time.Second},
		{"residencies", ResidencyBuckets, false, time.Microsecond, 40 * time.Microsecond},
		{"classic_only", TokenBuckets, true, time.Millisecond, 2 * time.Second},
		// 1 ns to 5 min is about 300 native buckets at schema 3: client_golang
		// halves the resolution as it goes (no reset within its hour),
		// durationHist as it writes; they must end at the same schema.
		{"over_the_bucket_limit", StageBuckets, false, time.Nanosecond, 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := histOpts("h_seconds", "help", tt.buckets, tt.classicOnly)
			ref := prometheus.NewHistogram(opts)
			ours := newDurationVec(opts, []string{"model"}).with("m")
			rng := rand.New(rand.NewPCG(7, 7))
			span := math.Log(float64(tt.hi) / float64(tt.lo))
			for batch := range 200 {
				ds := make([]time.Duration, batch%70) // empty batches too
				for i := range ds {
					ds[i] = time.Duration(float64(tt.lo) * math.Exp(rng.Float64()*span))
					if i%50 == 7 {
						ds[i] = 0 // the zero bucket
					}
				}
				for _, d := range ds {
					ref.Observe(d.Seconds())
				}
				ours.observeAll(ds)
			}
			var want, got dto.Metric
			if err := ref.Write(&want); err != nil {
				t.Fatal(err)
			}
			if err := ours.Write(&got); err != nil {
				t.Fatal(err)
			}
			if l := got.GetLabel(); len(l) != 1 || l[0].GetName() != "model" || l[0].GetValue() != "m" {
				t.Errorf("labels %v", l)
			}
			wh, gh := want.GetHistogram(), got.GetHistogram()
			if ws, gs := wh.GetSampleSum(), gh.GetSampleSum(); math.Abs(ws-gs) > 1e-9*ws {
				t.Errorf("sum %v, client_golang's %v", gs, ws)
			}
			wh.SampleSum, gh.SampleSum = nil, nil
			wh.CreatedTimestamp, gh.CreatedTimestamp = nil, nil
			if !proto.Equal(wh, gh) {
				t.Errorf("exposition differs:\n got  %v\n want %v", gh, wh)
			}
			if !tt.classicOnly && wh.GetSchema() != nativeSchema && tt.name != "over_the_bucket_limit" {
				t.Errorf("client_golang wrote schema %d, want %d", wh.GetSchema(), nativeSchema)
			}
			if tt.name == "over_the_bucket_limit" && gh.GetSchema() >= nativeSchema {
				t.Errorf("schema %d over the bucket limit, want lower than %d", gh.GetSchema(), nativeSchema)
			}
		})
	}
}

// TestDurationHistNegative: a negative duration counts as zero.
func TestDurationHistNegative(t *testing.T) {
	h := newDurationVec(histOpts("h_seconds", "help", TokenBuckets, false), nil).with()
	h.observeAll([]time.Duration{-time.Second, 0})
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	hh := m.GetHistogram()
	if hh.GetSampleCount() != 2 || hh.GetSampleSum() != 0 || hh.GetZeroCount() != 2 || hh.GetBucket()[0].GetCumulativeCount() != 2 {
		t.Errorf("two durations of at most zero: %v", hh)
	}
}

// TestDurationVecChildren: the same label values give the same child, and
// every child is collected.
func TestDurationVecChildren(t *testing.T) {
	v := newDurationVec(histOpts("h_seconds", "help", TokenBuckets, false), []string{"model", "upstream"})
	first, again := v.with("a", "b"), v.with("a", "b")
	if first != again || first == v.with("a", "c") {
		t.Error("with: one child per label values")
	}
	ch := make(chan prometheus.Metric, 4)
	v.Collect(ch)
	close(ch)
	var got []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d.GetLabel()[1].GetValue())
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("collected upstreams %v", got)
	}
}
