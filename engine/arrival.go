package engine

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
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
// and do not count.
type arrivalConn struct {
	net.Conn
	armed atomic.Bool
	at    atomic.Int64 // nanoseconds since arrivalEpoch; 0: not seen
}

var arrivalEpoch = time.Now()

func (c *arrivalConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.armed.CompareAndSwap(true, false) {
		c.at.Store(max(int64(time.Since(arrivalEpoch)), 1))
	}
	return n, err
}

// arrived returns when the current request's first bytes were read.
func (c *arrivalConn) arrived() (time.Time, bool) {
	at := c.at.Load()
	return arrivalEpoch.Add(time.Duration(at)), at != 0
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
	ac := &arrivalConn{Conn: c}
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

// arrivedAt is when r's first bytes were read, or now when that is unknown.
func arrivedAt(r *http.Request) time.Time {
	if ac := requestConn(r); ac != nil {
		if t, ok := ac.arrived(); ok {
			return t
		}
	}
	return time.Now()
}
