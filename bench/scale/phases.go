package main

import "time"

// phaseCPU is a streaming run's proxy CPU split by phase: the plateau,
// while every stream is open, and the ramp before it, while they start.
type phaseCPU struct {
	ok bool
	// perEvent is the plateau's CPU per token event.
	perEvent time.Duration
	// perStart is the ramp's CPU per stream, less what the ramp's events
	// cost at the plateau's rate: accepting, dialing, the first event.
	perStart time.Duration
}

// minPlateau is the shortest plateau whose CPU is read: /proc counts CPU
// in 10 ms ticks.
const minPlateau = 500 * time.Millisecond

// arrivalCounts are token events by arrival (clientResult.Arrivals).
type arrivalCounts struct {
	base    int64 // Unix ns
	buckets []int32
}

// count returns the events that arrived in the buckets starting in
// [from, to), Unix ns.
func (a arrivalCounts) count(from, to int64) int {
	n := 0
	for i, c := range a.buckets {
		at := a.base + int64(i)*int64(arrivalBucket)
		if at >= from && at < to {
			n += int(c)
		}
	}
	return n
}

// splitPhases splits the CPU the proxy spent from start (read before the
// client began) through samples into the plateau's, between the samples
// taken inside [allOpen, firstEnd], and the ramp's, from start to the
// plateau's first sample.
func splitPhases(start procUsage, samples []procSample, arrived arrivalCounts, allOpen, firstEnd int64, streams int) phaseCPU {
	var first, last *procSample
	for i := range samples {
		s := &samples[i]
		if s.at < allOpen || s.at > firstEnd {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || time.Duration(last.at-first.at) < minPlateau || streams <= 0 {
		return phaseCPU{}
	}
	events := arrived.count(first.at, last.at)
	if events == 0 {
		return phaseCPU{}
	}
	perEvent := (last.cpu - first.cpu) / time.Duration(events)
	ramp := first.cpu - start.cpu - time.Duration(arrived.count(start.at, first.at))*perEvent
	return phaseCPU{ok: true, perEvent: perEvent, perStart: ramp / time.Duration(streams)}
}
