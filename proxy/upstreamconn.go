package proxy

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/stages"
)

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
	idle     func(bool) // the watcher's report of anything arriving while idle (Watcher.WatchIdle)
	kernel   sock.SegmentCounter
	reads    uint64 // reads that began an arrival
	lastFull bool   // the last read filled its buffer
	// writing: a request is being written (no byte read since its first
	// write); the counts when it began.
	writing       bool
	written       bool // a first write was made
	readsAtWrite  uint64
	segsAtWrite   uint32
	kernelCounted bool
	// segsNow: the kernel's count as arrivals last read it, still the
	// count (no byte was read since, and a connection on which anything
	// arrives while pooled is closed), so the next request's write starts
	// from it without asking the kernel again.
	segsNow      uint32
	segsNowKnown bool

	tl     *stages.Timeline // the request timing the reads (clock); nil: none
	readAt time.Duration    // offset of the last read with bytes; < 0 before one
	sentAt time.Duration    // offset of the request's send mark: no arrival before it
}

func (c *countingConn) Write(p []byte) (int, error) {
	if !c.writing {
		c.writing = true
		c.readsAtWrite = c.reads
		switch {
		case !c.written:
			// A new connection has received no data segment yet: its
			// server speaks when spoken to (HTTP, TLS). No getsockopt; a
			// socket without a count falls back to reads (arrivals).
			c.segsAtWrite, c.kernelCounted = 0, true
		case c.segsNowKnown:
			c.segsAtWrite, c.kernelCounted = c.segsNow, true
		default:
			c.segsAtWrite, c.kernelCounted = c.kernel.SegmentsIn(c.Conn)
		}
		c.written, c.segsNowKnown = true, false
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
		c.writing, c.segsNowKnown = false, false
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

// park readies the connection for the pool, its response read to its
// framing's end: it is watched while idle, and what already waits in its
// socket is reported at once (a re-armed registration reports what is
// ready), so no peek is made here; unpark's check covers a connection
// without a watcher. "" when it may be pooled, else why it is to be
// closed instead.
func (c *countingConn) park() endreason.ConnDiscard {
	if c.watcher != nil && !c.watcher.WatchIdle(c.watch, c.idle) {
		return endreason.DiscardIdleClosed // the watcher reported its end
	}
	return ""
}

// unpark readies a connection taken from the pool for a request, right
// before it is written: ok when nothing arrived while it was idle and
// nothing waits in the socket. Not ok, why is what to count, "" when the
// watcher's idle report counted it already.
func (c *countingConn) unpark() (why endreason.ConnDiscard, ok bool) {
	if c.watcher != nil && !c.watcher.EndIdle(c.watch) {
		return "", false
	}
	if c.raw != nil {
		switch bytes, ended := c.raw.Unread(); {
		case bytes:
			return endreason.DiscardReadableAtReuse, false
		case ended:
			return endreason.DiscardClosedAtReuse, false
		}
	}
	return "", true
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
			c.segsNow, c.segsNowKnown = segs, true
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
