package engines

import (
	"bytes"
	"errors"
	"io"
	"math"

	"github.com/ttftlens/ttftlens/sse"
)

// DefaultLineLimit is the line size limit used when NewLineScanner is given
// limit <= 0 (the same as the SSE scanner's event limit).
const DefaultLineLimit = sse.DefaultLimit

const (
	lineInitialBuf = 4 << 10
	lineSlack      = 4 << 10
	lineEmptyReads = 100
)

var errLineBadReadCount = errors.New("engines: reader returned invalid count")

// LineScanner splits a newline-delimited JSON stream (Ollama's native
// streaming, application/x-ndjson) into lines, with the contract of
// sse.Scanner: every byte is returned once, in Raw order, so a proxy can
// forward lines unchanged as soon as each is complete; steady-state Next
// allocates nothing. Not safe for concurrent use.
type LineScanner struct {
	rd     io.Reader
	buf    []byte // buf[r:w] read and not yet returned
	r, w   int
	p      int // buf[r:p] holds no '\n'
	limit  int
	maxBuf int
	empty  int
	rerr   error // the reader's error, reported after the buffered lines
	stop   error // sticky
}

// NewLineScanner returns a LineScanner reading r. limit bounds the bytes of
// one line, its "\n" excluded; a longer line makes Next return
// sse.ErrEventTooLarge after at most about limit bytes were buffered.
// limit <= 0 means DefaultLineLimit.
func NewLineScanner(r io.Reader, limit int) *LineScanner {
	if limit <= 0 {
		limit = DefaultLineLimit
	}
	maxBuf := limit + lineSlack
	if limit > math.MaxInt-lineSlack {
		maxBuf = math.MaxInt
	}
	s := &LineScanner{buf: make([]byte, min(lineInitialBuf, maxBuf)), limit: limit, maxBuf: maxBuf}
	s.Reset(r)
	return s
}

// Reset makes s read r as a new stream, keeping its buffer and limit.
func (s *LineScanner) Reset(r io.Reader) {
	*s = LineScanner{rd: r, buf: s.buf, limit: s.limit, maxBuf: s.maxBuf}
}

// Next returns the next line: raw holds its exact bytes, "\n" included,
// and line the same without surrounding JSON whitespace (spaces, tabs, CR,
// LF). A blank line comes back with an empty line: forward raw, do not
// inspect it. Both alias the scanner's buffer and are valid until the next
// call to Next or Reset.
//
// The end of the stream: io.EOF when no bytes are pending. A last line
// without "\n" before a clean io.EOF is returned as a line (err nil), and
// io.EOF on the next call: Ollama ends every line with "\n" (its
// streamResponse writes json.Marshal output plus "\n"), but an NDJSON
// producer may omit the last one, and a truncated line is caught by
// parsing it (a JSON syntax error: Event.Malformed), not here. Any other
// error of the reader (io.ErrUnexpectedEOF from a cut chunked body, a
// reset) is returned as is, after the complete lines read before it, with
// the pending bytes of an unfinished line in raw. sse.ErrEventTooLarge for
// a line over the limit, unwrapped. Errors are sticky until Reset.
func (s *LineScanner) Next() (raw, line []byte, err error) {
	if s.stop != nil {
		return nil, nil, s.stop
	}
	for {
		if i := bytes.IndexByte(s.buf[s.p:s.w], '\n'); i >= 0 {
			end := s.p + i + 1
			if end-1-s.r > s.limit {
				s.stop = sse.ErrEventTooLarge
				return nil, nil, s.stop
			}
			raw = s.buf[s.r:end]
			s.r, s.p = end, end
			return raw, trimJSONSpace(raw), nil
		}
		s.p = s.w
		if s.w-s.r > s.limit {
			s.stop = sse.ErrEventTooLarge
			return nil, nil, s.stop
		}
		if s.rerr != nil {
			s.stop = s.rerr
			if s.r == s.w {
				return nil, nil, s.stop
			}
			raw = s.buf[s.r:s.w]
			s.r = s.w
			if s.rerr == io.EOF {
				return raw, trimJSONSpace(raw), nil
			}
			return raw, nil, s.stop
		}
		s.fill()
	}
}

// fill reads more bytes, making room first.
func (s *LineScanner) fill() {
	if s.r == s.w {
		s.r, s.w, s.p = 0, 0, 0
	}
	if s.w == len(s.buf) {
		if s.r > 0 {
			n := copy(s.buf, s.buf[s.r:s.w])
			s.p -= s.r
			s.r, s.w = 0, n
		} else if len(s.buf) < s.maxBuf {
			nb := make([]byte, min(max(2*len(s.buf), lineInitialBuf), s.maxBuf))
			copy(nb, s.buf[:s.w])
			s.buf = nb
		}
	}
	n, err := s.rd.Read(s.buf[s.w:])
	if n < 0 || n > len(s.buf)-s.w {
		s.rerr = errLineBadReadCount
		return
	}
	s.w += n
	switch {
	case err != nil:
		s.rerr = err
	case n == 0:
		if s.empty++; s.empty >= lineEmptyReads {
			s.rerr = io.ErrNoProgress
		}
	default:
		s.empty = 0
	}
}

// trimJSONSpace trims JSON whitespace from both ends of b.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
