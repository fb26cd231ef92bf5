// Package sse parses and writes Server-Sent Events streams (text/event-stream).
//
// The parser follows the WHATWG HTML "event stream interpretation" rules
// (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation)
// on bytes, without decoding UTF-8, and keeps every received byte so a proxy can
// forward blocks unchanged. It is incremental: input may be split across reads at
// any byte, and a block is returned as soon as its terminating blank line arrives.
//
// The one way a result can depend on how the input was split: a blank line that
// ends with CR is dispatched at once, so if the CR was the last byte read, the LF of
// a CRLF arrives after its block was returned and comes back as a block of its own
// (Raw "\n", no fields). Concatenating Raw always gives back the input.
//
// The package imports only the standard library.
package sse

import (
	"bytes"
	"errors"
	"io"
	"math"
)

// DefaultLimit is the event size limit used when NewScanner is given limit <= 0.
const DefaultLimit = 1 << 20

// ErrEventTooLarge is returned by Scanner.Next when one event is longer than the
// Scanner's limit. It is returned as is (never wrapped) and is sticky.
var ErrEventTooLarge = errors.New("sse: event larger than limit")

// errBadReadCount is returned when the underlying reader reports an impossible count.
var errBadReadCount = errors.New("sse: reader returned invalid count")

const (
	initialBufSize = 1 << 10 // first buffer size; it grows up to limit+bufSlack
	bufSlack       = 4 << 10 // room beyond the limit so reads stay large near it
	maxEmptyReads  = 100     // consecutive (0, nil) reads before io.ErrNoProgress, as in bufio
	utf8BOM        = "\xEF\xBB\xBF"
)

// Event is one block of an event stream: every line up to and including the blank
// line that ends it. All slices alias the Scanner's buffers and are valid only until
// the next call to Next or Reset; copy what must outlive that.
type Event struct {
	// Raw holds the exact bytes of the block as received, line ends and the
	// terminating blank line included. A leading BOM is part of the first block's Raw.
	// It is at most limit bytes long, or limit+1 when it ends with CRLF; it is only
	// "\n" for the late LF of a CRLF whose CR ended the block before (see Next).
	Raw []byte
	// Data is the data field values joined with "\n". With a single data line it
	// aliases Raw.
	Data []byte
	// HasData reports whether the block had at least one data field (Data may be
	// empty even so: "data\n\n"). Per WHATWG only such blocks dispatch an event.
	HasData bool
	// Type is the value of the last event field, empty when none (a browser would
	// then use "message").
	Type []byte
	// ID is the value of the last id field that contains no NUL byte.
	ID []byte
	// HasID reports whether ID was set by the block (an empty id resets the last
	// event ID in a browser, so it is not the same as no id).
	HasID bool
	// Retry is the value of the last valid retry field (ASCII digits only, fits
	// in int64), or -1 when there is none.
	Retry int64
	// Comment is the text of the first comment line, without the ':' and one
	// leading space.
	Comment []byte
	// Comments is the number of comment lines in the block.
	Comments int
}

// block holds the fields of the block being scanned as offsets from its start,
// so they survive the buffer being moved or grown.
type block struct {
	nData            int
	dataOff, dataEnd int
	typeOff, typeEnd int
	idOff, idEnd     int
	hasID            bool
	retry            int64
	comOff, comEnd   int
	comments         int
}

// scanState is the outcome of scanning the buffered bytes.
type scanState int

const (
	needMore  scanState = iota // no complete block buffered
	haveBlock                  // a complete block ends at the returned index
	tooLarge                   // the current block is longer than the limit
)

// Scanner reads an event stream and returns one block per Next call.
// In steady state Next allocates nothing.
// A Scanner is not safe for concurrent use.
type Scanner struct {
	rd   io.Reader
	buf  []byte // buf[r:w] was read and not yet returned; len(buf) is the capacity in use
	r    int    // start of the current block
	w    int    // end of the bytes read
	p    int    // scan position: buf[ln:p] holds no line end, so no byte is scanned twice
	ln   int    // start of the current line
	lf   int    // if lf >= p, the index of the first LF at or after p
	lfTo int    // if lf < 0, buf[p:lfTo] holds no LF (keeps CR-only streams linear)

	limit  int
	maxBuf int

	bomCheck   bool // at stream start, the BOM has not been looked for yet
	crSkip     bool // the last line ended with CR: an LF at p completes that line end
	lfSkip     bool // the last block ended with CR at the end of the buffer: an LF at r completes it
	emptyReads int

	rerr  error // error from the reader, reported once the buffered blocks are returned
	stop  error // sticky error returned by Next
	ready int   // > 0: Ready found a complete block ending there, which Next returns

	cur  block
	data []byte // joined data of multi-line events
}

// NewScanner returns a Scanner reading r. limit bounds the bytes of one event (all
// its lines, up to and including the first byte of the line end of its blank line,
// so a final CRLF may make Raw limit+1 bytes long); a longer event makes Next return
// ErrEventTooLarge after at most about limit bytes were buffered. limit <= 0 means
// DefaultLimit.
func NewScanner(r io.Reader, limit int) *Scanner {
	if limit <= 0 {
		limit = DefaultLimit
	}
	maxBuf := limit + bufSlack
	if limit > math.MaxInt-bufSlack {
		maxBuf = math.MaxInt
	}
	s := &Scanner{
		buf:    make([]byte, min(initialBufSize, maxBuf)),
		limit:  limit,
		maxBuf: maxBuf,
	}
	s.Reset(r)
	return s
}

// Reset makes s read from r as a new stream (the BOM rule applies again), keeping
// its buffers and its limit. Data buffered from the previous stream is dropped.
func (s *Scanner) Reset(r io.Reader) {
	*s = Scanner{
		rd:       r,
		buf:      s.buf,
		data:     s.data[:0],
		limit:    s.limit,
		maxBuf:   s.maxBuf,
		lf:       -1,
		bomCheck: true,
		cur:      block{retry: -1},
	}
}

// Buffered returns the number of bytes read from the reader but not yet returned
// by Next.
func (s *Scanner) Buffered() int { return s.w - s.r }

// Ready reports whether a complete block is buffered, so that the next Next
// returns it without reading. It never reads, and what it scans Next does
// not scan again.
func (s *Scanner) Ready() bool {
	if s.ready == 0 && s.stop == nil {
		if end, st := s.scan(); st == haveBlock {
			s.ready = end
		}
	}
	return s.ready > 0
}

// Next returns the next block of the stream: all lines up to and including the
// blank line that ends it. Blocks without a data field (comments only, a lone blank
// line) are returned too, with HasData false, so every byte can be forwarded.
// The Event and its slices are valid until the next call to Next or Reset.
//
// Next reads from the underlying reader only when no complete block is buffered,
// so a block is returned as soon as its blank line has been read. When that blank
// line ends with a CR that is the last byte read so far, the block is returned
// without waiting; if the next byte turns out to be the LF of a CRLF, it is
// returned alone as the next block (Raw "\n", no fields).
//
// Errors: io.EOF at a clean end of stream (no bytes pending);
// io.ErrUnexpectedEOF when the stream ends inside a block, with the block's bytes in
// the returned Event's Raw (other fields unset); ErrEventTooLarge; an error of the
// underlying reader is returned as is, after the complete blocks read before it,
// with the pending bytes of an unfinished block in Raw. Errors are sticky: later
// calls return the same error with an empty Event, until Reset. The exception is a
// reader error whose Timeout() is true (a read deadline passed): it is returned with
// an empty Event, nothing is lost, and the next call reads on.
func (s *Scanner) Next() (Event, error) {
	var ev Event
	err := s.NextInto(&ev)
	return ev, err
}

// NextInto is Next writing the block into ev, which it overwrites whole.
// The Event stays off the caller's stack: a goroutine per stream that waits
// in Next holds its frames while it waits.
func (s *Scanner) NextInto(ev *Event) error {
	*ev = Event{Retry: -1}
	if s.stop != nil {
		return s.stop
	}
	if end := s.ready; end > 0 {
		s.ready = 0
		s.take(end, ev)
		return nil
	}
	for {
		end, st := s.scan()
		switch st {
		case haveBlock:
			s.take(end, ev)
			return nil
		case tooLarge:
			s.stop = ErrEventTooLarge
			return ErrEventTooLarge
		}
		if s.rerr != nil {
			err := s.rerr
			if isTimeout(err) {
				// A read deadline passed: nothing is lost and the stream may
				// go on. Report it without ending the stream; the partial
				// block stays buffered (Buffered() > 0 says one is pending).
				s.rerr = nil
				return err
			}
			if err == io.EOF {
				if s.r == s.w {
					s.stop = io.EOF
					return io.EOF
				}
				err = io.ErrUnexpectedEOF
			}
			s.stop = err
			ev.Raw = s.buf[s.r:s.w:s.w]
			s.r, s.p, s.ln = s.w, s.w, s.w
			return err
		}
		s.fill()
	}
}

// scan processes the buffered bytes from where the last call stopped. With
// haveBlock it returns the end index of the complete block starting at s.r.
func (s *Scanner) scan() (int, scanState) {
	if s.lfSkip {
		if s.r == s.w {
			return 0, needMore
		}
		s.lfSkip = false
		if s.buf[s.r] == '\n' { // the rest of the CRLF that ended the last block
			return s.r + 1, haveBlock
		}
	}
	if s.bomCheck {
		n := s.w - s.r
		if n < len(utf8BOM) && string(s.buf[s.r:s.w]) == utf8BOM[:n] {
			return 0, s.more() // could still be a BOM
		}
		s.bomCheck = false
		if n >= len(utf8BOM) && string(s.buf[s.r:s.r+len(utf8BOM)]) == utf8BOM {
			s.p = s.r + len(utf8BOM)
			s.ln = s.p
		}
	}
	for {
		if s.crSkip {
			if s.p == s.w {
				return 0, s.more()
			}
			s.crSkip = false
			if s.buf[s.p] == '\n' {
				s.p++
				s.ln = s.p
			}
		}
		// The line ends at the first CR or LF. Find the LF with the cached search
		// and look for a CR only before it, so no byte is scanned twice per line.
		lf := s.findLF()
		e := lf
		if lf < 0 {
			e = s.w
		}
		if i := bytes.IndexByte(s.buf[s.p:e], '\r'); i >= 0 {
			e = s.p + i
		} else if lf < 0 {
			s.p = s.w
			return 0, s.more()
		}
		// The block is at least e+1-r bytes long, counting the line end's first byte.
		if e-s.r >= s.limit {
			return 0, tooLarge
		}
		if e == s.ln { // blank line: the block is complete
			end := e + 1
			if s.buf[e] == '\r' {
				if end < s.w {
					if s.buf[end] == '\n' {
						end++
					}
				} else {
					s.lfSkip = true
				}
			}
			return end, haveBlock
		}
		s.line(s.ln, e)
		s.crSkip = s.buf[e] == '\r'
		s.p = e + 1
		s.ln = s.p
	}
}

// more reports whether the pending block may still fit the limit once more bytes
// arrive: none of the buffered bytes ends it, so it is longer than they are.
func (s *Scanner) more() scanState {
	if s.w-s.r >= s.limit {
		return tooLarge
	}
	return needMore
}

// findLF returns the index of the first LF in buf[p:w], or -1.
func (s *Scanner) findLF() int {
	if s.lf >= s.p {
		return s.lf
	}
	from := s.p
	if s.lf < 0 && s.lfTo > from {
		from = s.lfTo
	}
	if i := bytes.IndexByte(s.buf[from:s.w], '\n'); i >= 0 {
		s.lf = from + i
		return s.lf
	}
	s.lf, s.lfTo = -1, s.w
	return -1
}

// line interprets the non-empty line buf[start:end] of the current block.
func (s *Scanner) line(start, end int) {
	line := s.buf[start:end]
	off := start - s.r
	if line[0] == ':' {
		if s.cur.comments == 0 {
			v := 1
			if len(line) > 1 && line[1] == ' ' {
				v = 2
			}
			s.cur.comOff, s.cur.comEnd = off+v, off+len(line)
		}
		s.cur.comments++
		return
	}
	name, v := line, len(line) // a line without ':' is a field with an empty value
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, v = line[:i], i+1
		if v < len(line) && line[v] == ' ' {
			v++
		}
	}
	value := line[v:]
	vOff, vEnd := off+v, off+len(line)
	switch string(name) {
	case "data":
		switch s.cur.nData {
		case 0:
			s.cur.dataOff, s.cur.dataEnd = vOff, vEnd
		case 1:
			s.data = append(s.data[:0], s.buf[s.r+s.cur.dataOff:s.r+s.cur.dataEnd]...)
			fallthrough
		default:
			s.data = append(s.data, '\n')
			s.data = append(s.data, value...)
		}
		s.cur.nData++
	case "event":
		s.cur.typeOff, s.cur.typeEnd = vOff, vEnd
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			s.cur.idOff, s.cur.idEnd = vOff, vEnd
			s.cur.hasID = true
		}
	case "retry":
		if n, ok := parseRetry(value); ok {
			s.cur.retry = n
		}
	}
}

// parseRetry parses a retry value: one or more ASCII digits that fit in int64.
func parseRetry(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// take writes the complete block buf[r:end] into ev and starts the next one.
func (s *Scanner) take(end int, ev *Event) {
	raw := s.buf[s.r:end:end]
	c := &s.cur
	*ev = Event{
		Raw:      raw,
		HasData:  c.nData > 0,
		Type:     raw[c.typeOff:c.typeEnd:c.typeEnd],
		HasID:    c.hasID,
		Retry:    c.retry,
		Comments: c.comments,
	}
	switch {
	case c.nData == 1:
		ev.Data = raw[c.dataOff:c.dataEnd:c.dataEnd]
	case c.nData > 1:
		ev.Data = s.data[:len(s.data):len(s.data)]
	}
	if c.hasID {
		ev.ID = raw[c.idOff:c.idEnd:c.idEnd]
	}
	if c.comments > 0 {
		ev.Comment = raw[c.comOff:c.comEnd:c.comEnd]
	}
	s.r, s.p, s.ln = end, end, end
	*c = block{retry: -1}
}

// fill reads once from the reader into the free end of buf, first moving the
// pending bytes to the front or growing buf (up to maxBuf) when little room is left.
// Callers guarantee w-r < limit, so there is always room.
func (s *Scanner) fill() {
	if s.r > 0 && (s.r == s.w || len(s.buf)-s.w < len(s.buf)/2) {
		copy(s.buf, s.buf[s.r:s.w])
		s.shift(s.r)
	}
	if len(s.buf)-s.w < len(s.buf)/2 && len(s.buf) < s.maxBuf {
		n := s.maxBuf
		if len(s.buf) <= s.maxBuf/2 {
			n = 2 * len(s.buf)
		}
		nb := make([]byte, n)
		copy(nb, s.buf[s.r:s.w])
		s.buf = nb
		s.shift(s.r)
	}
	n, err := s.rd.Read(s.buf[s.w:])
	if n < 0 || n > len(s.buf)-s.w {
		s.rerr = errBadReadCount
		return
	}
	s.w += n
	if err != nil {
		s.rerr = err
		return
	}
	if n > 0 {
		s.emptyReads = 0
	} else if s.emptyReads++; s.emptyReads >= maxEmptyReads {
		s.rerr = io.ErrNoProgress
	}
}

// isTimeout reports a reader error that only says a deadline passed
// (net.Error's Timeout), after which reading may go on.
func isTimeout(err error) bool {
	// Unwrapped by hand: errors.As into an interface variable allocates, and
	// this runs at every stream's end.
	for ; err != nil; err = errors.Unwrap(err) {
		if t, ok := err.(interface{ Timeout() bool }); ok {
			return t.Timeout()
		}
	}
	return false
}

// shift moves every index d bytes towards the front after the pending bytes moved.
func (s *Scanner) shift(d int) {
	if d == 0 {
		return
	}
	s.r -= d
	s.w -= d
	s.p -= d
	s.ln -= d
	if s.lf >= d {
		s.lf -= d
	} else {
		s.lf = -1
	}
	s.lfTo = max(s.lfTo-d, 0)
}
