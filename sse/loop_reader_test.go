package sse_test

// loopReader serves stream over and over, at most chunk bytes per Read (0: as many
// as fit), without allocating.
type loopReader struct {
	stream []byte
	pos    int
	chunk  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	if l.chunk > 0 && len(p) > l.chunk {
		p = p[:l.chunk]
	}
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.stream[l.pos:])
		n += c
		l.pos += c
		if l.pos == len(l.stream) {
			l.pos = 0
		}
	}
	return n, nil
}
