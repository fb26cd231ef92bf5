//go:build !linux

package sock

import (
	"net"
	"time"
)

// Conn reads and writes a TCP socket through its net.Conn: there are no
// raw calls here (see the package's contract).
type Conn struct{ conn net.Conn }

// New returns the Conn of conn's socket (its own, for a connection Dial
// or RawListener made), nil when conn is not a TCP socket.
func New(conn net.Conn) *Conn {
	if c, ok := conn.(*clientConn); ok {
		return c.raw
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	return &Conn{conn: tc}
}

// Read reads as net.Conn.Read does; it blocks, never returning
// ErrWouldBlock.
func (c *Conn) Read(p []byte) (int, error) { return c.conn.Read(p) }

// ReadStamped reads as Read does; no receive timestamps here (waited -1).
func (c *Conn) ReadStamped(p []byte) (int, time.Duration, error) {
	n, err := c.conn.Read(p)
	return n, -1, err
}

// StampReceives: the kernel's receive timestamps are Linux's.
func (c *Conn) StampReceives() bool { return false }

// StampListener does nothing here.
func StampListener(net.Listener) {}

// Write writes p as net.Conn.Write does.
func (c *Conn) Write(p []byte) (int, error) { return c.conn.Write(p) }

// WriteVec writes bufs in order, gathered where the system can.
func (c *Conn) WriteVec(bufs [][]byte) (int, error) {
	v := net.Buffers(bufs)
	n, err := v.WriteTo(c.conn)
	return int(n), err
}

// Pump calls step until it is done: reads block here, so step runs to its
// end at once.
func (c *Conn) Pump(step func() (more bool)) error {
	for step() {
	}
	return nil
}

// Pumpable: no Watcher reports an end here.
func (c *Conn) Pumpable() bool { return false }

// Shutdown closes the connection: with nothing pumped, Close waits for no
// reader.
func (c *Conn) Shutdown() { _ = c.conn.Close() }

// Unread cannot ask the socket here: empty, as far as it knows.
func (c *Conn) Unread() (bytes, ended bool) { return false, false }

// WaitReadable does not wait here: true at once.
func WaitReadable(net.Conn, time.Duration) bool { return true }
