package proxy

import (
	"bytes"
	"errors"
)

// framing takes an upstream response body's HTTP/1.1 framing off the bytes
// read from the connection, in place (RFC 9112 §6.3, §7.1): a chunked
// body, one of a known length, or one that ends when the connection does.
// It resumes wherever a read ended, so the body can be read in whatever
// pieces the socket gives, straight into the reader's buffer. A chunked
// body's trailer fields are kept, up to maxTrailerBytes, for the engine
// signals read at the end; what is past that is read and dropped.
type framing struct {
	kind  framingKind
	left  int64 // bytes of the body (length) or of the current chunk's data (chunked) not yet read
	state chunkState
	size  int64 // the chunk size being read
	run   int   // bytes of the current size line (extensions included), or trailer line
	done  bool  // the body ended (a close-delimited one: set by its reader at the connection's end)
	// extra: bytes came after the body's end, which only a broken upstream
	// sends; the connection is not used again.
	extra    bool
	trailers []byte // the trailer section's field lines, each ending in LF, CRs dropped
	dropping bool   // the trailer line being read is not kept
}

type framingKind uint8

const (
	framingChunked framingKind = iota
	framingLength
	framingClose // the body ends at the connection's end
)

type chunkState uint8

const (
	chunkSize    chunkState = iota // in a chunk size (at least one hex digit read when run > 0)
	chunkExt                       // in the size line's extensions, up to its LF
	chunkSizeLF                    // the size line's CR was read
	chunkData                      // in a chunk's data
	chunkDataCR                    // after a chunk's data: its CRLF
	chunkDataLF                    // after a chunk's data and CR
	trailerStart                   // at the start of a trailer line (or the blank line ending the body)
	trailerLine                    // in a trailer line, up to its LF
	trailerEndLF                   // the blank line's CR was read
)

const (
	// maxChunkLine bounds a chunk size line, extensions included.
	maxChunkLine = 4 << 10
	// maxTrailerBytes bounds the trailer fields kept.
	maxTrailerBytes = 4 << 10
	// maxChunkSize keeps a size's arithmetic far from overflowing.
	maxChunkSize = 1 << 56
)

var errChunkFraming = errors.New("upstream sent a malformed chunked body (RFC 9112 §7.1)")

// reset readies f for a body framed by kind, of length n for framingLength.
// The trailer buffer is kept.
func (f *framing) reset(kind framingKind, n int64) {
	*f = framing{kind: kind, left: n, trailers: f.trailers[:0]}
	if kind == framingLength && n == 0 {
		f.done = true
	}
}

// decode takes the framing off p, the bytes just read, moving the body's
// bytes to the front: it returns how many there are. Bytes after the end
// of the body are dropped (f.extra). errChunkFraming ends the body.
func (f *framing) decode(p []byte) (int, error) {
	if f.done {
		f.extra = f.extra || len(p) > 0
		return 0, nil
	}
	switch f.kind {
	case framingClose:
		return len(p), nil
	case framingLength:
		n := int(min(int64(len(p)), f.left))
		f.left -= int64(n)
		f.done = f.left == 0
		f.extra = n < len(p)
		return n, nil
	}
	w := 0 // p[:w] holds the body bytes so far
	for i := 0; i < len(p); {
		if f.state == chunkData {
			n := int(min(int64(len(p)-i), f.left))
			w += copy(p[w:], p[i:i+n])
			i += n
			if f.left -= int64(n); f.left == 0 {
				f.state = chunkDataCR
			}
			continue
		}
		if f.state == trailerLine {
			end := bytes.IndexByte(p[i:], '\n')
			line := p[i:]
			if end >= 0 {
				line = p[i : i+end+1]
			}
			f.keepTrailer(line)
			i += len(line)
			if end >= 0 {
				f.state = trailerStart
			}
			continue
		}
		if err := f.step(p[i]); err != nil {
			return w, err
		}
		i++
		if f.done {
			f.extra = i < len(p)
			break
		}
	}
	return w, nil
}

// step reads one byte of the chunked framing outside chunk data and
// trailer lines. Bare LFs end lines as CRLFs do (RFC 9112 §2.2 lets a
// recipient accept them).
func (f *framing) step(c byte) error {
	switch f.state {
	case chunkSize:
		if v, ok := hexValue(c); ok {
			if f.size > maxChunkSize/16 {
				return errChunkFraming
			}
			f.size = f.size<<4 | int64(v)
			if f.run++; f.run > maxChunkLine {
				return errChunkFraming
			}
			return nil
		}
		if f.run == 0 {
			return errChunkFraming // a size has at least one digit
		}
		switch c {
		case ';', ' ', '\t': // extensions, after optional whitespace
			f.state = chunkExt
		case '\r':
			f.state = chunkSizeLF
		case '\n':
			f.endSizeLine()
		default:
			return errChunkFraming
		}
	case chunkExt:
		if f.run++; f.run > maxChunkLine {
			return errChunkFraming
		}
		if c == '\n' {
			f.endSizeLine()
		}
	case chunkSizeLF:
		if c != '\n' {
			return errChunkFraming
		}
		f.endSizeLine()
	case chunkDataCR:
		switch c {
		case '\r':
			f.state = chunkDataLF
		case '\n':
			f.state = chunkSize
		default:
			return errChunkFraming
		}
	case chunkDataLF:
		if c != '\n' {
			return errChunkFraming
		}
		f.state = chunkSize
	case trailerStart:
		switch c {
		case '\r':
			f.state = trailerEndLF
		case '\n':
			f.done = true
		default:
			f.state = trailerLine
			f.keepTrailer([]byte{c})
		}
	case trailerEndLF:
		if c != '\n' {
			return errChunkFraming
		}
		f.done = true
	}
	return nil
}

// endSizeLine starts the chunk whose size line just ended: its data, or
// the trailer section after the last chunk.
func (f *framing) endSizeLine() {
	f.left, f.size, f.run = f.size, 0, 0
	if f.left == 0 {
		f.state = trailerStart
		return
	}
	f.state = chunkData
}

// keepTrailer appends a piece of a trailer line (its LF, if there, last),
// CRs dropped. A line that would take the kept fields past
// maxTrailerBytes is dropped whole.
func (f *framing) keepTrailer(b []byte) {
	if !f.dropping {
		if len(f.trailers)+len(b) > maxTrailerBytes { // CRs counted: a bound, not a measure
			f.trailers = f.trailers[:len(f.trailers)-f.run]
			f.dropping = true
		} else {
			for _, c := range b {
				if c != '\r' {
					f.trailers = append(f.trailers, c)
					f.run++
				}
			}
		}
	}
	if b[len(b)-1] == '\n' {
		f.run, f.dropping = 0, false
	}
}

// trailer returns the value of the trailer field name (case-insensitive),
// nil when the body had none.
func (f *framing) trailer(name string) []byte {
	for rest := f.trailers; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if ok && len(k) == len(name) && bytes.EqualFold(k, []byte(name)) {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
