//go:build linux

package sock

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// tcpConn is a TCP socket this package accepted or dialed itself, with
// raw calls: a net.Conn read and written through its Conn, waited on by
// Go's poller through an os.File (os.NewFile asks the descriptor's flags
// with the runtime's own fcntl and registers it with the poller, neither
// through the scheduler's system-call state), so that making one wakes
// no monitor thread. Go's net would make accept4 or connect, setsockopt
// (TCP_NODELAY), getsockname and getpeername through that state. The
// peer's address comes with the accept or is the one dialed; the local
// one is asked (getsockname) only when wanted and not known. Its errors
// are net.Conn's (net.ErrClosed once closed, never os.ErrClosed).
type tcpConn struct {
	f      *os.File
	rc     syscall.RawConn
	raw    *Conn
	raddr  *net.TCPAddr
	laddr  atomic.Pointer[net.TCPAddr]
	closed atomic.Bool
}

// newTCPConn takes the connected non-blocking socket fd (closing it when
// it fails): laddr is its local address when known, else nil.
func newTCPConn(fd int, laddr, raddr *net.TCPAddr) (*tcpConn, error) {
	f := os.NewFile(uintptr(fd), "tcp")
	// A file Go's poller does not watch has no deadlines: nothing raw
	// could wait on it.
	if err := f.SetDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &tcpConn{f: f, rc: rc, raddr: raddr}
	if laddr != nil {
		c.laddr.Store(laddr)
	}
	c.raw = newConn(c, rc)
	return c, nil
}

func (c *tcpConn) own() *Conn     { return c.raw }
func (c *tcpConn) isClosed() bool { return c.closed.Load() }

func (c *tcpConn) Read(p []byte) (int, error)  { return c.raw.Read(p) }
func (c *tcpConn) Write(p []byte) (int, error) { return c.raw.Write(p) }

// Close closes the socket (through the poller, which must drop it first:
// the close(2) is the one call here made in the scheduler's system-call
// state).
func (c *tcpConn) Close() error {
	c.closed.Store(true)
	return c.opErr("close", c.f.Close())
}

// CloseWrite shuts down the sending side (shutdown(2), SHUT_WR).
func (c *tcpConn) CloseWrite() error {
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_SHUTDOWN, fd, syscall.SHUT_WR, 0)
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("shutdown", errno)
	}
	return c.opErr("close", err)
}

func (c *tcpConn) SetDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetDeadline(t))
}

func (c *tcpConn) SetReadDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetReadDeadline(t))
}

func (c *tcpConn) SetWriteDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetWriteDeadline(t))
}

// SyscallConn returns the socket's RawConn (the Watcher's, Conn's).
func (c *tcpConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

func (c *tcpConn) RemoteAddr() net.Addr { return c.raddr }

// LocalAddr asks the socket (getsockname, raw) the first time when it was
// not known; an empty address when the socket cannot tell.
func (c *tcpConn) LocalAddr() net.Addr {
	if a := c.laddr.Load(); a != nil {
		return a
	}
	var sa syscall.RawSockaddrAny
	var errno syscall.Errno
	_ = c.rc.Control(func(fd uintptr) {
		n := uint32(syscall.SizeofSockaddrAny)
		_, _, errno = syscall.RawSyscall(syscall.SYS_GETSOCKNAME, fd, uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&n)))
	})
	a := &net.TCPAddr{}
	if errno == 0 {
		if got := tcpAddrOf(&sa); got != nil {
			a = got
		}
	}
	c.laddr.Store(a)
	return a
}

// opErr wraps err as net.Conn's methods would, with net.ErrClosed for the
// poller's "closed file" (the socket is an os.File to it) once closed.
func (c *tcpConn) opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if pe, ok := err.(*os.PathError); ok {
		err = pe.Err
	}
	if c.closed.Load() && !errors.Is(err, os.ErrDeadlineExceeded) {
		err = net.ErrClosed
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: err}
}

// tcpAddrOf reads an AF_INET or AF_INET6 socket address; nil for another
// family. A scoped IPv6 address's zone is its interface's index (naming
// the interface would be a lookup).
func tcpAddrOf(sa *syscall.RawSockaddrAny) *net.TCPAddr {
	switch sa.Addr.Family {
	case syscall.AF_INET:
		in := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), in.Addr[:]...)), Port: netPort(in.Port)}
	case syscall.AF_INET6:
		in := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		a := &net.TCPAddr{IP: net.IP(append([]byte(nil), in.Addr[:]...)), Port: netPort(in.Port)}
		if in.Scope_id != 0 {
			a.Zone = strconv.FormatUint(uint64(in.Scope_id), 10)
		}
		return a
	}
	return nil
}

// netPort reads a port kept in network byte order.
func netPort(p uint16) int {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return int(b[0])<<8 | int(b[1])
}
