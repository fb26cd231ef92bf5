//go:build linux

package sock

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// RawListener hands out ln's connections read and written through their
// Conn (Of finds it). A TCP listener's are accepted with raw accept4 calls
// under the RawConn of a duplicate of its descriptor (net's listener has
// a RawConn that only controls, never waits), none through the
// scheduler's system-call state (see tcpConn). Each has TCP_NODELAY and
// Go's default keep-alive (acceptedOptions): inherited from the listening
// socket when it had them before it listened (Listen), set on each socket
// accepted otherwise, since a connection that completed its handshake
// before RawListener set them on the listener inherited none (and would
// have Nagle's algorithm hold its small writes for the client's delayed
// acknowledgement, 40 ms on Linux). Another listener's connections (TLS)
// are Go's, read and written through a Conn when they are TCP. Closing the
// listener closes both descriptors.
func RawListener(ln net.Listener) net.Listener {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return rawListener{ln}
	}
	lrc, err := tl.SyscallConn()
	if err != nil {
		return rawListener{ln}
	}
	inherited := hasOptions(lrc, acceptedOptions)
	if !inherited && setOptions(lrc, acceptedOptions) != nil {
		return rawListener{ln}
	}
	f, err := tl.File() // non-blocking, in the poller
	if err != nil {
		return rawListener{ln}
	}
	rc, err := f.SyscallConn()
	if err != nil || f.SetDeadline(time.Time{}) != nil {
		f.Close()
		return rawListener{ln}
	}
	a := &acceptListener{TCPListener: tl, f: f, rc: rc, setEach: !inherited}
	if la, ok := tl.Addr().(*net.TCPAddr); ok && !la.IP.IsUnspecified() {
		a.laddr = la // every socket it accepts has it
	}
	return a
}

// acceptListener accepts with raw accept4 calls on f, the listening
// socket's duplicate.
type acceptListener struct {
	*net.TCPListener
	f     *os.File
	rc    syscall.RawConn // f's
	laddr *net.TCPAddr    // nil: a wildcard address, each socket's own asked when wanted
	// setEach: acceptedOptions are set on each socket accepted, not
	// inherited.
	setEach bool
	closed  atomic.Bool
}

// accepted is one Accept's call: the socket taken and its peer's address,
// or the error.
type accepted struct {
	fd    int
	sa    syscall.RawSockaddrAny
	errno syscall.Errno
}

// Accept waits in the poller until a connection is there, and takes it.
// Its errors are net's: a *net.OpError with net.ErrClosed once the
// listener is closed, os.ErrDeadlineExceeded past its deadline, the
// errno of accept4 (EMFILE: no descriptor free) otherwise.
func (ln *acceptListener) Accept() (net.Conn, error) {
	a := accepted{fd: -1}
	if err := ln.rc.Read(a.once); err != nil {
		if ln.closed.Load() && !errors.Is(err, os.ErrDeadlineExceeded) {
			err = net.ErrClosed // the poller's "closed file" for f
		}
		return nil, ln.opErr(err)
	}
	if a.errno != 0 {
		return nil, ln.opErr(os.NewSyscallError("accept4", a.errno))
	}
	if ln.setEach {
		// As Go's net, which ignores these errors too: a socket just
		// accepted takes them, and one that does not still works.
		_ = setRaw(uintptr(a.fd), acceptedOptions)
	}
	raddr := tcpAddrOf(&a.sa)
	if raddr == nil {
		raddr = &net.TCPAddr{}
	}
	c, err := newTCPConn(a.fd, ln.laddr, raddr)
	if err != nil {
		return nil, ln.opErr(err)
	}
	return c, nil
}

// once takes one connection from the listening socket fd's queue; false
// when it is empty (the poller then waits for the next). A connection
// that was reset while queued (ECONNABORTED) is skipped, as Go's net
// skips it.
func (a *accepted) once(fd uintptr) bool {
	for {
		n := uint32(syscall.SizeofSockaddrAny)
		r, _, errno := syscall.RawSyscall6(syscall.SYS_ACCEPT4, fd, uintptr(unsafe.Pointer(&a.sa)), uintptr(unsafe.Pointer(&n)),
			syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
			a.fd = int(r)
			return true
		case syscall.EINTR, syscall.ECONNABORTED:
			continue
		case syscall.EAGAIN:
			return false
		}
		a.errno = errno
		return true
	}
}

// Close closes the duplicate (an Accept waiting on it returns
// net.ErrClosed), then the listener.
func (ln *acceptListener) Close() error {
	ln.closed.Store(true)
	_ = ln.f.Close()
	return ln.TCPListener.Close()
}

// SetDeadline sets the deadline of the Accept calls.
func (ln *acceptListener) SetDeadline(t time.Time) error {
	if err := ln.f.SetDeadline(t); err != nil {
		return ln.opErr(net.ErrClosed)
	}
	return nil
}

func (ln *acceptListener) opErr(err error) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: err}
}
