package refengine

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/internal/sock"
)

// A request's time in the engine starts when its first bytes are read from
// the connection, before net/http parses its head, so that the engine's
// report (recv, PROTOCOL.md) covers the parsing too. Serve's connections
// note that moment; a handler served another way (the caller's own
// http.Server) starts the clock at its own entry.

// arrivalConn notes when a connection's next request begins to arrive: the
// first read that returns bytes after the connection opened or after the
// previous request's handler ended (rearm). Reads of a request's body, and
// net/http's background read while a handler runs, come before the rearm
// and do not count. Where the kernel timestamps receives (Linux), that
// first read also learns how long its bytes had waited in the socket
// before the server read them: the engine was busy elsewhere (PROTOCOL.md,
// unread).
type arrivalConn struct {
	net.Conn
	raw    *sock.Conn // nil: no receive timestamps
	armed  atomic.Bool
	late   atomic.Bool  // the arrival's read had no timestamp: the next read's will do
	at     atomic.Int64 // nanoseconds since arrivalEpoch; 0: not seen
	unread atomic.Int64 // nanoseconds the first bytes waited unread; negative: unknown
}

var arrivalEpoch = time.Now()

func (c *arrivalConn) Read(p []byte) (int, error) {
	if c.raw == nil || !c.armed.Load() && !c.late.Load() {
		// A read begun before the rearm (net/http's one-byte background
		// read while the previous handler ran) may take the next request's
		// first byte: its arrival, without the kernel's timestamp, which
		// the next read, of the rest of the same bytes, brings.
		n, err := c.Conn.Read(p)
		if n > 0 && c.armed.CompareAndSwap(true, false) {
			c.at.Store(max(int64(time.Since(arrivalEpoch)), 1))
			c.late.Store(c.raw != nil)
		}
		return n, err
	}
	n, waited, err := c.raw.ReadStamped(p)
	if n == 0 {
		return n, err
	}
	now := max(int64(time.Since(arrivalEpoch)), 1)
	switch {
	case c.armed.CompareAndSwap(true, false):
		c.at.Store(now)
		c.unread.Store(int64(waited))
	case c.late.CompareAndSwap(true, false) && waited >= 0:
		// waited runs to this read; the arrival was the earlier one.
		c.unread.Store(max(int64(waited)-(now-c.at.Load()), 0))
	}
	return n, err
}

// arrived returns when the current request's first bytes were read.
func (c *arrivalConn) arrived() (time.Time, bool) {
	at := c.at.Load()
	return arrivalEpoch.Add(time.Duration(at)), at != 0
}

// waitedUnread returns how long the current request's first bytes waited
// in the socket before that read, when the kernel said.
func (c *arrivalConn) waitedUnread() (time.Duration, bool) {
	u := c.unread.Load()
	return time.Duration(u), u >= 0
}

// maxDrainBytes is what net/http itself reads of a body its handler left
// unread, to keep the connection; past it, the connection closes.
const maxDrainBytes = 256 << 10

// rearm readies c for its next request once r's handler is done. The rest
// of r's body is read first, as net/http would after the handler, so that
// those reads are not taken for the next request's arrival.
func (c *arrivalConn) rearm(r *http.Request) {
	_, _ = io.CopyN(io.Discard, r.Body, maxDrainBytes)
	c.at.Store(0)
	c.unread.Store(-1)
	c.late.Store(false)
	c.armed.Store(true)
}

type arrivalKey struct{}

// arrivalListener hands out arrivalConns.
type arrivalListener struct{ net.Listener }

func (l arrivalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ac := &arrivalConn{Conn: c, raw: stampReceives(c)}
	ac.unread.Store(-1)
	ac.armed.Store(true)
	return ac, nil
}

// withArrivalConn is the http.Server's ConnContext: it puts the connection
// where requestConn finds it.
func withArrivalConn(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*arrivalConn); ok {
		return context.WithValue(ctx, arrivalKey{}, ac)
	}
	return ctx
}

// requestConn returns r's arrivalConn, or nil when r did not come through
// Serve.
func requestConn(r *http.Request) *arrivalConn {
	ac, _ := r.Context().Value(arrivalKey{}).(*arrivalConn)
	return ac
}

// unreadFor is how long r's first bytes waited in the socket before they
// were read, when known.
func unreadFor(r *http.Request) (time.Duration, bool) {
	if ac := requestConn(r); ac != nil {
		if _, ok := ac.arrived(); ok {
			return ac.waitedUnread()
		}
	}
	return 0, false
}

// arrivedAt is when r's first bytes were read, or now when that is unknown.
func arrivedAt(r *http.Request) time.Time {
	if ac := requestConn(r); ac != nil {
		if t, ok := ac.arrived(); ok {
			return t
		}
	}
	return time.Now()
}

// stampReceives asks the kernel to timestamp what c receives, so that a
// request's first read can say how long its bytes waited in the socket.
// It returns c's socket, nil when c is not a TCP socket or the kernel
// refuses (elsewhere than Linux, always).
func stampReceives(c net.Conn) *sock.Conn {
	if raw := sock.New(c); raw != nil && raw.StampReceives() {
		return raw
	}
	return nil
}
