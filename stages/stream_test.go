package stages

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// nearestRank is the textbook nearest-rank percentile of a sorted slice:
// the value at rank ceil(p/100 * n), computed in integers.
func nearestRank(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	rank := (p*n + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// feed records content events at the given offsets.
func feed(s *Stream, stall time.Duration, at ...time.Duration) {
	for _, a := range at {
		s.Content(a, stall)
	}
}

func TestStreamContent(t *testing.T) {
	tests := []struct {
		name       string
		at         []time.Duration
		stall      time.Duration
		wantGaps   Gaps
		wantStalls int
	}{
		{"none", nil, 0, Gaps{}, 0},
		{"one event, no gap", []time.Duration{5 * ms}, ms, Gaps{}, 0},
		{"two events", []time.Duration{5 * ms, 8 * ms}, 0, Gaps{N: 1, P50: 3 * ms, P90: 3 * ms, P99: 3 * ms, Max: 3 * ms}, 0},
		{"stall threshold 0 means never", []time.Duration{0, time.Hour}, 0,
			Gaps{N: 1, P50: time.Hour, P90: time.Hour, P99: time.Hour, Max: time.Hour}, 0},
		{"gap equal to threshold is not a stall", []time.Duration{0, 10 * ms, 21 * ms, 31 * ms}, 10 * ms,
			Gaps{N: 3, P50: 10 * ms, P90: 11 * ms, P99: 11 * ms, Max: 11 * ms}, 1},
		{"four gaps: p50 is rank 2", []time.Duration{0, 1 * ms, 3 * ms, 6 * ms, 10 * ms}, 2 * ms,
			Gaps{N: 4, P50: 2 * ms, P90: 4 * ms, P99: 4 * ms, Max: 4 * ms}, 2},
		{"zero gaps", []time.Duration{7, 7, 7}, 1, Gaps{N: 2, P50: 0, P90: 0, P99: 0, Max: 0}, 0},
		{"out of order offsets give a zero gap, never a negative one", []time.Duration{10 * ms, 4 * ms, 6 * ms}, ms,
			Gaps{N: 2, P50: 0, P90: 2 * ms, P99: 2 * ms, Max: 2 * ms}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Stream
			feed(&s, tc.stall, tc.at...)
			if s.ContentEvents != len(tc.at) {
				t.Errorf("ContentEvents = %d, want %d", s.ContentEvents, len(tc.at))
			}
			if s.Stalls != tc.wantStalls {
				t.Errorf("Stalls = %d, want %d", s.Stalls, tc.wantStalls)
			}
			if got := s.Gaps(); got != tc.wantGaps {
				t.Errorf("Gaps = %+v, want %+v", got, tc.wantGaps)
			}
		})
	}
}

// TestStreamGapsOracle checks percentiles against a sorted oracle for many
// sizes, including the ones where p*n is an integer (rank boundaries).
func TestStreamGapsOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	sizes := []int{1, 2, 3, 4, 99, 100, 101, 199, 200, 201, 1000, 4096}
	for range 300 {
		sizes = append(sizes, 1+r.IntN(3000))
	}
	for _, n := range sizes {
		var s Stream
		at := time.Duration(r.Int64N(int64(time.Second)))
		s.Content(at, 0)
		gaps := make([]time.Duration, 0, n)
		maxGap := time.Duration(0)
		stall := time.Duration(r.Int64N(int64(20 * ms)))
		stalls := 0
		for range n {
			var g time.Duration
			switch r.IntN(10) {
			case 0:
				g = 0
			case 1:
				g = time.Duration(r.Int64N(int64(time.Second)))
			default:
				g = time.Duration(r.Int64N(int64(10 * ms)))
			}
			at += g
			s.Content(at, stall)
			gaps = append(gaps, g)
			maxGap = max(maxGap, g)
			if stall > 0 && g > stall {
				stalls++
			}
		}
		values := slices.Clone(s.GapValues())
		slices.Sort(values)
		sorted := slices.Sorted(slices.Values(gaps))
		if !slices.Equal(values, sorted) {
			t.Fatalf("n=%d: GapValues differ from the gaps fed", n)
		}
		want := Gaps{N: n, P50: nearestRank(sorted, 50), P90: nearestRank(sorted, 90), P99: nearestRank(sorted, 99), Max: maxGap}
		if got := s.Gaps(); got != want {
			t.Fatalf("n=%d: Gaps = %+v, want %+v", n, got, want)
		}
		if s.Stalls != stalls || s.ContentEvents != n+1 {
			t.Fatalf("n=%d: Stalls %d ContentEvents %d, want %d %d", n, s.Stalls, s.ContentEvents, stalls, n+1)
		}
	}
}

func TestStreamMaxGapsCap(t *testing.T) {
	var s Stream
	at := time.Duration(0)
	s.Content(at, 0)
	for range maxGaps {
		at += ms
		s.Content(at, 5*ms)
	}
	// Past the cap: a huge gap still counts for Max and stalls, but is not
	// kept for the percentiles.
	at += time.Hour
	s.Content(at, 5*ms)
	at += 2 * ms
	s.Content(at, 5*ms)
	if n := len(s.GapValues()); n != maxGaps {
		t.Fatalf("kept %d gaps, want the cap %d", n, maxGaps)
	}
	if s.Stalls != 1 {
		t.Errorf("Stalls = %d, want 1 (the gap past the cap)", s.Stalls)
	}
	if s.ContentEvents != maxGaps+3 {
		t.Errorf("ContentEvents = %d, want %d", s.ContentEvents, maxGaps+3)
	}
	g := s.Gaps()
	if want := (Gaps{N: maxGaps, P50: ms, P90: ms, P99: ms, Max: time.Hour}); g != want {
		t.Errorf("Gaps = %+v, want %+v", g, want)
	}
}

func TestStreamResetRelease(t *testing.T) {
	fill := func(s *Stream, n int) {
		s.Events, s.Blocked, s.MaxResidency = 3, time.Second, time.Millisecond
		s.Arrivals, s.FirstTogether = 7, true
		for i := range n {
			s.Content(time.Duration(i)*ms, ms/2)
		}
	}
	tests := []struct {
		name     string
		n        int
		release  bool
		wantKeep bool
	}{
		{"reset small keeps buffer", 100, false, true},
		{"reset large keeps buffer", 10000, false, true},
		{"release small keeps buffer", 100, true, true},
		{"release at 4096 keeps buffer", 4097, true, true}, // 4096 gaps from 4097 events
		{"release large drops buffer", 10000, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Stream
			fill(&s, tc.n)
			oldCap := cap(s.GapValues())
			if tc.n == 4097 {
				// Make the capacity exactly 4096 so the boundary is tested.
				s = Stream{gaps: make([]time.Duration, 0, 4096)}
				fill(&s, tc.n)
				oldCap = cap(s.GapValues())
				if oldCap != 4096 {
					t.Fatalf("setup: cap %d", oldCap)
				}
			}
			if tc.release {
				s.Release()
			} else {
				s.Reset()
			}
			if s.Events != 0 || s.ContentEvents != 0 || s.Stalls != 0 || s.Blocked != 0 || s.MaxResidency != 0 || s.Arrivals != 0 || s.FirstTogether {
				t.Errorf("counters survived: %+v", s)
			}
			if got := s.Gaps(); got != (Gaps{}) {
				t.Errorf("Gaps after reset = %+v", got)
			}
			if len(s.GapValues()) != 0 {
				t.Errorf("%d gaps survived", len(s.GapValues()))
			}
			if kept := cap(s.GapValues()) == oldCap && oldCap > 0; kept != tc.wantKeep {
				t.Errorf("buffer kept = %v (cap %d -> %d), want %v", kept, oldCap, cap(s.GapValues()), tc.wantKeep)
			}
			// After a reset the first event has no predecessor: no gap.
			s.Content(time.Hour, ms)
			if len(s.GapValues()) != 0 || s.Stalls != 0 {
				t.Errorf("first event after reset made a gap against the old stream")
			}
			s.Content(time.Hour+3*ms, ms)
			if g := s.Gaps(); g != (Gaps{N: 1, P50: 3 * ms, P90: 3 * ms, P99: 3 * ms, Max: 3 * ms}) || s.Stalls != 1 {
				t.Errorf("after reset: Gaps %+v Stalls %d", g, s.Stalls)
			}
		})
	}
}

func TestStreamMaxAfterReset(t *testing.T) {
	var s Stream
	feed(&s, 0, 0, time.Hour)
	s.Reset()
	feed(&s, 0, 0, ms)
	if g := s.Gaps(); g.Max != ms {
		t.Fatalf("Max after reset = %v, want 1ms (old max leaked)", g.Max)
	}
}

func TestStreamGapsCached(t *testing.T) {
	var s Stream
	feed(&s, 0, 0, 3*ms, 4*ms, 10*ms)
	want := Gaps{N: 3, P50: 3 * ms, P90: 6 * ms, P99: 6 * ms, Max: 6 * ms}
	for i := range 3 {
		if g := s.Gaps(); g != want {
			t.Fatalf("call %d: Gaps = %+v, want %+v", i+1, g, want)
		}
	}
	// A content event after Gaps invalidates the summary.
	s.Content(30*ms, 0)
	if g, w := s.Gaps(), (Gaps{N: 4, P50: 3 * ms, P90: 20 * ms, P99: 20 * ms, Max: 20 * ms}); g != w {
		t.Fatalf("after more content: Gaps = %+v, want %+v", g, w)
	}
	s.Reset()
	if g := s.Gaps(); g != (Gaps{}) {
		t.Fatalf("after Reset: Gaps = %+v", g)
	}
}

// TestStreamCopyKeepsSummary: a Stream copied by value after Gaps (a record
// handed to an asynchronous sink, while the original goes back to a pool)
// must keep reporting its own summary, not whatever the reused original
// computes next.
func TestStreamCopyKeepsSummary(t *testing.T) {
	var s Stream
	feed(&s, 0, 0, 3*ms, 4*ms, 10*ms)
	want := s.Gaps()
	c := s // the copy
	s.Reset()
	feed(&s, 0, 0, time.Hour, 2*time.Hour)
	s.Gaps()
	if got := c.Gaps(); got != want {
		t.Fatalf("copy's Gaps = %+v after the original was reused, want its own %+v", got, want)
	}
}
