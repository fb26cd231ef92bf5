package sock

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"syscall"
)

// MaxWriteVec bounds the buffers one WriteVec gathers.
const MaxWriteVec = 4

// ErrWouldBlock is a read in a pump finding the socket empty: the pump
// waits for more. It is a Timeout, so readers above keep what they hold
// and read on at the next call (as they do at a read deadline).
var ErrWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string { return "the socket has no bytes yet" }
func (wouldBlock) Timeout() bool { return true }

// opError wraps err as net.Conn's methods would; an error RawConn already
// wrapped (op "raw-read", "raw-write") is unwrapped first, so it reads
// "read tcp …: i/o timeout", not twice.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	if cl, ok := c.conn.(interface{ isClosed() bool }); ok && cl.isClosed() && !errors.Is(err, os.ErrDeadlineExceeded) {
		err = net.ErrClosed // the poller's "closed file" for a socket it holds as a file
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.conn.LocalAddr(), Addr: c.conn.RemoteAddr(), Err: err}
}

// clientConn is a connection Go's net accepted (elsewhere than Linux, or
// behind another listener), or dialed elsewhere than Linux, read and
// written through its Conn.
type clientConn struct {
	*net.TCPConn
	raw *Conn
}

func (c *clientConn) Read(p []byte) (int, error)  { return c.raw.Read(p) }
func (c *clientConn) Write(p []byte) (int, error) { return c.raw.Write(p) }

// Of returns the Conn a connection RawListener accepted (or Dial dialed)
// is read and written through, nil for any other connection.
func Of(conn net.Conn) *Conn {
	switch c := conn.(type) {
	case *clientConn:
		return c.raw
	case ownConn:
		return c.own()
	}
	return nil
}

// ownConn is a connection of this package's own (Linux: tcpConn).
type ownConn interface{ own() *Conn }

// rawListener hands out ln's TCP connections read and written through
// their Conn; others as they are.
type rawListener struct{ net.Listener }

func (ln rawListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if raw := New(tc); raw != nil {
			return &clientConn{TCPConn: tc, raw: raw}, nil
		}
	}
	return c, nil
}

// rawConn finds the socket under conn, unwrapping TLS; nil when there is
// none (an in-memory pipe, a wrapper hiding it).
func rawConn(conn net.Conn) syscall.RawConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
