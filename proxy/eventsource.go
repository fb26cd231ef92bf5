package proxy

import (
	"io"

	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/sse"
)

// eventSource is where a relay's events come from: the upstream body,
// decoded when it is compressed, cut into blocks (SSE events, or NDJSON
// lines in the same shape) by its scanner, and read in a pump of the
// upstream socket when the socket allows (relay.pumpTo). Only the request's
// goroutine touches it.
type eventSource struct {
	body upstreamBody
	pump *sock.Conn // the upstream socket, when the stream is read in a pump
	dec  decoder    // for a compressed upstream stream
	scan *sse.Scanner
	// lines reads NDJSON streams (Ollama's native API); made for the first
	// one, so an exchange that only relays event streams holds no buffer for it.
	lines         *engines.LineScanner
	ndjson        bool
	decoding      bool // the body is compressed: the scanner reads dec
	maxEventBytes int
	ev            sse.Event // the block read last
}

func newEventSource(maxEventBytes int) eventSource {
	return eventSource{scan: sse.NewScanner(nil, maxEventBytes), maxEventBytes: maxEventBytes}
}

// reset readies s for another request, keeping its buffers and
// decompressors.
func (s *eventSource) reset() {
	s.scan.Reset(nil)
	if s.lines != nil {
		s.lines.Reset(nil)
	}
	dec := s.dec
	dec.src = nil
	*s = eventSource{dec: dec, scan: s.scan, lines: s.lines, maxEventBytes: s.maxEventBytes}
}

// start points s at the upstream body, decoding it when it is compressed;
// false for an encoding it cannot decode. A plain event stream is read in
// a pump when its socket can be pumped.
func (s *eventSource) start(ndjson bool, encoding []byte) bool {
	s.ndjson, s.decoding = ndjson, len(encoding) > 0
	var src io.Reader = &s.body
	if len(encoding) > 0 {
		if !s.dec.reset(&s.body, encoding) {
			return false
		}
		src = &s.dec
	}
	if !ndjson && len(encoding) == 0 {
		s.pump = s.body.pumpable()
	}
	if ndjson {
		if s.lines == nil {
			s.lines = engines.NewLineScanner(src, s.maxEventBytes)
		}
		s.lines.Reset(src)
	} else {
		s.scan.Reset(src)
	}
	return true
}

// next reads the next upstream block into ev: an SSE event, or an NDJSON
// line in the same shape.
func (s *eventSource) next() error {
	if s.ndjson {
		return s.nextLine()
	}
	return s.scan.NextInto(&s.ev)
}

// ready reports whether next returns without waiting for the upstream: the
// next block is read whole, or the body's end is (an NDJSON line is never
// known to be, nor the end behind a decoder).
func (s *eventSource) ready() bool {
	return !s.ndjson && (s.scan.Ready() || (!s.decoding && s.body.spent()))
}

func (s *eventSource) nextLine() error {
	raw, line, err := s.lines.Next()
	s.ev = sse.Event{Raw: raw, Data: line, HasData: len(line) > 0, Retry: -1}
	return err
}
