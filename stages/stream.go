package stages

import (
	"slices"
	"time"
)

// maxGaps bounds the inter-token gaps kept per request. Beyond it, gaps still
// count towards Max and stalls but not towards the percentiles.
const maxGaps = 1 << 16

// Stream accumulates what happens after the first token: content events,
// inter-token gaps, stalls and time blocked on the client. The zero value is
// ready; Reset keeps the gap buffer for reuse. Not safe for concurrent use.
type Stream struct {
	// Events counts all SSE events parsed (content or not).
	Events int
	// ContentEvents counts events that carried generated content.
	ContentEvents int
	// Stalls counts gaps longer than the stall threshold.
	Stalls int
	// Blocked is the time spent waiting for the client to take bytes
	// (transport backpressure after the first token).
	Blocked time.Duration
	// MaxResidency is the longest time an event spent inside the proxy,
	// parsed to flushed.
	MaxResidency time.Duration
	// Arrivals is how many pieces the upstream response came in, from the
	// request's write to the response's end: TCP segments carrying data
	// that the kernel received where it counts them (Linux), else socket
	// reads that returned bytes; 0 when not counted. FirstTogether says the
	// first two content events came in one socket read. Set by the relay;
	// the proxy's buffering rule reads them.
	Arrivals      int
	FirstTogether bool

	gaps    []time.Duration
	resid   []time.Duration
	maxGap  time.Duration
	last    time.Duration
	hasLast bool
	summed  bool // sum holds the result of Gaps (a flag, not a pointer, so a copy keeps its own)
	sum     Gaps
}

// Reset empties s, keeping its buffers.
func (s *Stream) Reset() {
	gaps, resid := s.gaps[:0], s.resid[:0]
	*s = Stream{gaps: gaps, resid: resid}
}

// Flushed records that an event spent d inside the proxy, from parsed to
// handed to the client socket.
func (s *Stream) Flushed(d time.Duration) {
	s.MaxResidency = max(s.MaxResidency, d)
	if len(s.resid) < maxGaps {
		s.resid = append(s.resid, d)
	}
}

// Residencies returns the kept per-event residencies, in event order. The
// slice is owned by s: read it, do not keep it.
func (s *Stream) Residencies() []time.Duration { return s.resid }

// Content records a content event parsed at offset at. stall is the gap
// above which the wait counts as a stall (0 = never).
func (s *Stream) Content(at, stall time.Duration) {
	s.ContentEvents++
	s.summed = false
	if s.hasLast {
		g := max(at-s.last, 0) // marks out of order must not make a negative gap
		if len(s.gaps) < maxGaps {
			s.gaps = append(s.gaps, g)
		}
		s.maxGap = max(s.maxGap, g)
		if stall > 0 && g > stall {
			s.Stalls++
		}
	}
	s.last, s.hasLast = at, true
}

// Gaps summarises the inter-token gaps.
type Gaps struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// Gaps returns the gap percentiles (nearest rank). The first call after the
// last Content sorts the kept gaps in place; later calls return the cached
// result, so every sink may call it.
func (s *Stream) Gaps() Gaps {
	if s.summed {
		return s.sum
	}
	n := len(s.gaps)
	s.sum = Gaps{}
	if n > 0 {
		slices.Sort(s.gaps)
		rank := func(p float64) time.Duration {
			i := int(p*float64(n)+0.999999) - 1
			return s.gaps[min(max(i, 0), n-1)]
		}
		s.sum = Gaps{N: n, P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: s.maxGap}
	}
	s.summed = true
	return s.sum
}

// Copy returns a copy of s that shares no memory with it, to keep after s
// is reused: its counters and its gaps' summary (Gaps, computed now: it
// sorts s's gaps in place), not the gaps themselves. It allocates nothing.
func (s *Stream) Copy() Stream {
	s.Gaps()
	c := *s
	c.gaps, c.resid = nil, nil
	return c
}

// GapValues returns the kept gaps (order unspecified). The slice is owned by
// s: read it, do not keep it.
func (s *Stream) GapValues() []time.Duration { return s.gaps }

// Release drops a gap buffer grown unusually large, so pooled Streams do not
// pin memory after one very long generation.
func (s *Stream) Release() {
	if cap(s.gaps) > 4096 {
		s.gaps = nil
	}
	if cap(s.resid) > 4096 {
		s.resid = nil
	}
	s.Reset()
}
