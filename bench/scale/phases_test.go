package main

import (
	"testing"
	"time"
)

func TestSplitPhases(t *testing.T) {
	const ms = int64(time.Millisecond)
	const base = 1_000_000 * ms // the client's base, Unix ns
	// A run whose streams start over its first second (10 events per
	// 10 ms bucket then), all open from 1 s to 5 s (20 per bucket).
	arrivals := make([]int32, 600)
	for i := range arrivals {
		arrivals[i] = 10
		if i >= 100 {
			arrivals[i] = 20
		}
	}
	arrived := arrivalCounts{base: base, buckets: arrivals}
	// CPU samples every 50 ms: 30 µs per event while all are open; the
	// ramp cost 100 ms beyond its 1,000 events at that rate.
	var samples []procSample
	for at := int64(0); at <= 5000*ms; at += 50 * ms {
		var cpu time.Duration
		if at <= 1000*ms {
			cpu = time.Duration(at/ms) * 130 * time.Millisecond / 1000 // 30 ms of events + 100 ms of starts, evenly
		} else {
			cpu = 130*time.Millisecond + time.Duration((at-1000*ms)/(10*ms))*20*30*time.Microsecond
		}
		samples = append(samples, procSample{at: base + at, cpu: cpu})
	}
	start := procUsage{at: base, cpu: 0}

	tests := []struct {
		name              string
		samples           []procSample
		allOpen, firstEnd int64
		streams           int
		want              phaseCPU
	}{
		{"ramp and plateau", samples, base + 1000*ms, base + 5000*ms, 1000,
			phaseCPU{ok: true, perEvent: 30 * time.Microsecond, perStart: 100 * time.Microsecond}},
		{"plateau starting between samples", samples, base + 990*ms, base + 5000*ms, 1000,
			phaseCPU{ok: true, perEvent: 30 * time.Microsecond, perStart: 100 * time.Microsecond}},
		{"plateau too short to read", samples, base + 1000*ms, base + 1400*ms, 1000, phaseCPU{}},
		{"no sample in the plateau", samples, base + 6000*ms, base + 7000*ms, 1000, phaseCPU{}},
		{"no samples", nil, base + 1000*ms, base + 5000*ms, 1000, phaseCPU{}},
		{"no streams", samples, base + 1000*ms, base + 5000*ms, 0, phaseCPU{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := splitPhases(start, tt.samples, arrived, tt.allOpen, tt.firstEnd, tt.streams)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestArrivalCounts(t *testing.T) {
	a := arrivalCounts{base: 1000, buckets: []int32{1, 2, 4, 8}}
	b := int64(arrivalBucket)
	tests := []struct {
		from, to int64
		want     int
	}{
		{1000, 1000 + 4*b, 15},
		{1000 + b, 1000 + 3*b, 6},
		{1000 + 1, 1000 + 2*b, 2}, // a bucket counts where it starts
		{0, 1000, 0},
		{1000 + 4*b, 1000 + 9*b, 0},
	}
	for _, tt := range tests {
		if got := a.count(tt.from, tt.to); got != tt.want {
			t.Errorf("count(%d, %d) = %d, want %d", tt.from, tt.to, got, tt.want)
		}
	}
}
