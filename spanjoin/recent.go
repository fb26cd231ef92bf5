package spanjoin

// recentSet remembers the traces of the last records written, with their
// span and upstream: a span that comes for one is late, not unmatched, and
// tells that its upstream sends spans. It is a ring: the oldest is
// forgotten first.
type recentSet struct {
	ring  []recentEntry
	next  int
	index map[[16]byte]int // trace → its latest entry in ring
}

type recentEntry struct {
	trace    [16]byte
	span     [8]byte
	upstream string
	used     bool
}

func newRecentSet(n int) recentSet {
	return recentSet{ring: make([]recentEntry, n), index: make(map[[16]byte]int, n)}
}

// add remembers a written record.
func (s *recentSet) add(trace [16]byte, span [8]byte, upstream string) {
	old := &s.ring[s.next]
	if old.used {
		if i, ok := s.index[old.trace]; ok && i == s.next {
			delete(s.index, old.trace)
		}
	}
	*old = recentEntry{trace: trace, span: span, upstream: upstream, used: true}
	s.index[trace] = s.next
	s.next = (s.next + 1) % len(s.ring)
}

// get returns the upstream of the written record a span of trace belongs
// to: the trace's latest record (the span may hang below the record's own
// in the engine's tree).
func (s *recentSet) get(trace [16]byte) (upstream string, ok bool) {
	i, ok := s.index[trace]
	if !ok {
		return "", false
	}
	return s.ring[i].upstream, true
}

// hasTrace reports whether a record of trace was written recently.
func (s *recentSet) hasTrace(trace [16]byte) bool {
	_, ok := s.index[trace]
	return ok
}
