package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Telling a stream that was held back upstream from one that arrived as it
// was generated. An engine writes each event as it produces it, or a few
// together when it lags a step or coalesces tokens, and a middlebox that
// passes the stream through (nginx, with proxy_buffering on too) forwards
// what each of its reads got: one to three content events per TCP segment.
// A middlebox that holds the stream releases kilobytes at a time (dozens of
// events per segment on one host; across a link, a segment's worth, about
// six of an OpenAI-shaped stream's events) or everything at the end. So the
// rule counts the pieces the response came in (stages.Stream.Arrivals)
// against its content events. The pieces are the segments the kernel
// received, not what the proxy's reads returned: a proxy short of CPU, or
// blocked on a slow client, reads many segments at once, which says nothing
// about the upstream. No duration is involved: a small model on a CPU
// decodes as fast as a held-back stream is released.
const (
	// burstMinEvents: fewer content events say nothing about their arrival.
	burstMinEvents = 8
	// burstEventsPerPiece: a stream is a burst when its content events
	// came at least this many per piece on average. Engines and pass-through
	// middleboxes send one to three per piece; a 4 KiB piece holds about
	// sixteen of an OpenAI-shaped stream's events, and a segment of an
	// Ethernet link (1448 bytes), across which a piece arrives split, six.
	burstEventsPerPiece = 4
	// framingPieces: the pieces of a response that need carry no content,
	// its headers and its end.
	framingPieces = 2
)

// shapeBuffering reads the signs of buffering in a response's headers.
func shapeBuffering(h *fasthttp.ResponseHeader, streaming bool) record.Buffering {
	var b record.Buffering
	eventStream := isEventStream(h.ContentType()) || isNDJSON(h.ContentType())
	if streaming && !eventStream && h.StatusCode() < 300 {
		b |= record.BufferedNotStream
	}
	if eventStream && h.ContentLength() >= 0 {
		b |= record.BufferedContentLength
	}
	if ce := h.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		b |= record.BufferedCompressed
	}
	return b
}

// arrivalBuffering reads the signs of buffering in how content arrived.
func arrivalBuffering(s *stages.Stream) record.Buffering {
	if s.ContentEvents < burstMinEvents || s.Arrivals == 0 {
		return 0
	}
	pieces := max(s.Arrivals-framingPieces, 1)
	if s.ContentEvents < burstEventsPerPiece*pieces {
		return 0
	}
	b := record.BufferedBurst
	if s.FirstTogether {
		// The first token was held back with the ones after it (it came in
		// one read with the second): the buffering delayed it too.
		b |= record.BufferedLateFirst
	}
	return b
}

// countingConn is a dialed upstream connection that counts the pieces each
// response arrives in, from the first write of its request (the counts
// start over there) to its end: the data segments the kernel received
// where it counts them, and reads that began an arrival. A read that fills
// the caller's buffer left more waiting in the socket, so the read after
// it is part of the same arrival. Only the goroutine using the connection
// reads or touches the fields.
type countingConn struct {
	net.Conn
	raw      *sock.Conn // reads and writes the socket; nil: Conn does
	watcher  *sock.Watcher
	watch    sock.Token // the registration that reports the connection's end (Watcher.WatchEnd)
	kernel   sock.SegmentCounter
	reads    uint64 // reads that began an arrival
	lastFull bool   // the last read filled its buffer
	// writing: a request is being written (no byte read since its first
	// write); the counts when it began.
	writing       bool
	readsAtWrite  uint64
	segsAtWrite   uint32
	kernelCounted bool

	tl     *stages.Timeline // the request timing the reads (clock); nil: none
	readAt time.Duration    // offset of the last read with bytes; < 0 before one
	sentAt time.Duration    // offset of the request's send mark: no arrival before it
}

func (c *countingConn) Write(p []byte) (int, error) {
	if !c.writing {
		c.writing = true
		c.readsAtWrite = c.reads
		c.segsAtWrite, c.kernelCounted = c.kernel.SegmentsIn(c.Conn)
	}
	if c.raw != nil {
		return c.raw.Write(p)
	}
	return c.Conn.Write(p)
}

// Close ends the watcher's registration, then the connection.
func (c *countingConn) Close() error {
	if c.watcher != nil {
		c.watcher.Unwatch(c.watch)
		c.watcher = nil
	}
	return c.Conn.Close()
}

func (c *countingConn) Read(p []byte) (n int, err error) {
	waited := time.Duration(-1)
	switch {
	case c.raw != nil && c.tl != nil:
		n, waited, err = c.raw.ReadStamped(p)
	case c.raw != nil:
		n, err = c.raw.Read(p)
	default:
		n, err = c.Conn.Read(p)
	}
	if n > 0 {
		c.writing = false
		if !c.lastFull {
			c.reads++
		}
		c.lastFull = n == len(p)
		if c.tl != nil {
			// The bytes arrived when the kernel received them; the time
			// they then waited for this goroutine is the proxy's own. A
			// quick answer can be received before the send was marked (the
			// mark is taken after the write returns): not before it.
			c.readAt = max(c.tl.Now()-max(waited, 0), c.sentAt)
		}
	}
	return n, err
}

// clock times the connection's reads on tl, a request's clock, from now
// on; nil stops (the relay asks for the first token's arrival only).
func (c *countingConn) clock(tl *stages.Timeline) {
	c.tl, c.readAt, c.sentAt = tl, -1, 0
}

// arrivals returns the pieces the response has come in so far (see
// stages.Stream.Arrivals).
func (c *countingConn) arrivals() int {
	if c.kernelCounted {
		if segs, ok := c.kernel.SegmentsIn(c.Conn); ok {
			return int(segs - c.segsAtWrite) // wraps around with the kernel's counter
		}
	}
	return int(c.reads - c.readsAtWrite)
}

// countedConn returns the counting connection of a dialed upstream
// connection (under TLS, the socket beneath it), or nil.
func countedConn(conn net.Conn) *countingConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	c, _ := conn.(*countingConn)
	return c
}

// readCount returns how many arrivals the connection's reads have seen;
// ok is false when the connection is not counted.
func (b *upstreamBody) readCount() (n uint64, ok bool) {
	if b.counted == nil {
		return 0, false
	}
	return b.counted.reads, true
}

// arrivals returns the pieces the response has come in so far; 0 when the
// connection is not counted.
func (b *upstreamBody) arrivals() int {
	if b.counted == nil {
		return 0
	}
	return b.counted.arrivals()
}

var errUnsupportedEncoding = errors.New("upstream event stream has an unsupported Content-Encoding")

// decoder decodes a compressed upstream stream. It creates its decompressor
// on the first Read, not before: the constructor reads the stream's header,
// which would otherwise block until the engine's first bytes (prefill).
// Decompressors are kept across requests.
type decoder struct {
	src      io.Reader
	encoding []byte
	r        io.Reader
	gz       *gzip.Reader
	zs       *zstd.Decoder
	fl       io.ReadCloser
}

// reset points d at src with the given Content-Encoding; it reports false
// for an encoding it cannot decode.
func (d *decoder) reset(src io.Reader, encoding []byte) bool {
	d.src, d.encoding, d.r = src, encoding, nil
	switch string(encoding) {
	case "gzip", "x-gzip", "deflate", "zstd":
		return true
	}
	return false
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.r == nil {
		if err := d.open(); err != nil {
			return 0, err
		}
	}
	return d.r.Read(p)
}

func (d *decoder) open() error {
	var err error
	switch string(d.encoding) {
	case "gzip", "x-gzip":
		if d.gz == nil {
			d.gz, err = gzip.NewReader(d.src)
		} else {
			err = d.gz.Reset(d.src)
		}
		d.r = d.gz
	case "deflate":
		if d.fl == nil {
			d.fl = flate.NewReader(d.src)
		} else {
			err = d.fl.(flate.Resetter).Reset(d.src, nil)
		}
		d.r = d.fl
	case "zstd":
		// One goroutine-free decoder per stream: the default decodes ahead
		// on goroutines of its own, which a stream that waits for its next
		// event does not need.
		if d.zs == nil {
			d.zs, err = zstd.NewReader(d.src, zstd.WithDecoderConcurrency(1))
		} else {
			err = d.zs.Reset(d.src)
		}
		d.r = d.zs
	default:
		return errUnsupportedEncoding
	}
	if err != nil {
		d.r = nil
		return err
	}
	return nil
}
