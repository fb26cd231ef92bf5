//go:build linux

package sock

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Conn reads and writes one TCP socket with raw system calls (see the
// package's contract).
type Conn struct {
	conn    net.Conn // for the addresses in errors
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool

	rbuf []byte
	rn   int
	rerr syscall.Errno
	// In a pump, reads are made on fd within the pump's one wait for the
	// socket; drained: the last one found the socket empty, so the next
	// returns ErrWouldBlock without a system call.
	pumping bool
	drained bool
	fd      uintptr
	waitErr error // the error that ended the pump's wait, for the next read
	// endWatched: a Watcher reports the peer's end (WatchEnd); peerEnded:
	// it did, or the socket was shut down.
	endWatched bool
	peerEnded  atomic.Bool
	// stamped reads (ReadStamped): recvmsg's header and control buffer,
	// kept here so that a read allocates nothing.
	stampFn func(fd uintptr) bool
	msg     syscall.Msghdr
	iov     syscall.Iovec
	oob     [64]byte
	// Unread's peek and its answer, kept here so that it allocates nothing.
	peekFn             func(fd uintptr)
	peekBytes, peekEnd bool
	wvec               [][]byte // what the write in progress writes, in order
	one                [1][]byte
	wn                 int
	werr               syscall.Errno
}

// New returns the Conn of conn's socket (its own, for a connection Dial
// or RawListener made), nil when conn is not a TCP socket.
func New(conn net.Conn) *Conn {
	if oc, ok := conn.(ownConn); ok {
		return oc.own()
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return newConn(conn, rc)
}

// newConn returns the Conn of the socket under rc; conn gives the
// addresses in its errors.
func newConn(conn net.Conn, rc syscall.RawConn) *Conn {
	c := &Conn{conn: conn, rc: rc}
	c.readFn, c.writeFn, c.stampFn = c.readOnce, c.writeGathered, c.recvOnce
	c.peekFn = func(fd uintptr) { c.peekBytes, c.peekEnd = peek(fd) }
	return c
}

// Unread reports what waits in the socket unread, without reading it and
// without waiting: bytes, or the peer's end (FIN, RST, or the socket shut
// down; also a socket that cannot be asked). Neither: it is empty. It is
// read's check that an idle connection is still only idle; call it where
// the connection is read.
func (c *Conn) Unread() (bytes, ended bool) {
	c.peekBytes, c.peekEnd = false, false
	if c.rc.Control(c.peekFn) != nil {
		return false, true
	}
	return c.peekBytes, c.peekEnd
}

// peek asks the socket fd for one byte without taking it or waiting
// (MSG_PEEK, MSG_DONTWAIT): bytes when it holds some, ended at its end
// (a read would return 0) or an error; both false when it is empty.
func peek(fd uintptr) (bytes, ended bool) {
	var b [1]byte
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			return false, false
		case errno == 0 && n > 0:
			return true, false
		}
		return false, true
	}
}

// Read reads as net.Conn.Read does: io.EOF at the peer's end, a
// *net.OpError otherwise. In a pump it returns ErrWouldBlock after a read
// that emptied the socket.
func (c *Conn) Read(p []byte) (int, error) { return c.readWith(c.readFn, "read", p) }

// readWith reads into p with fn, the system call named call, under the
// poller.
func (c *Conn) readWith(fn func(fd uintptr) bool, call string, p []byte) (int, error) {
	if c.waitErr != nil {
		err := c.waitErr
		c.waitErr = nil
		return 0, c.opError("read", err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.rbuf, c.rn, c.rerr = p, 0, 0
	var err error
	switch {
	case !c.pumping:
		err = c.rc.Read(fn)
	case c.drained && !c.peerEnded.Load(), !fn(c.fd):
		c.rbuf, c.drained = nil, true
		return 0, ErrWouldBlock
	case c.rn < len(p):
		// A stream socket's short read took all the bytes it held; not
		// its end, which the next read returns (see ended).
		c.drained = true
	}
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case c.rerr != 0:
		return 0, c.opError("read", os.NewSyscallError(call, c.rerr))
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

// Pump calls step inside one wait of Go's poller for the socket, as long
// as step asks for more (true) after a read returned ErrWouldBlock. A
// read then waits for the socket's readiness without asking the socket
// first: RawConn.Read forgets a readiness it saw before it was called, so
// outside one such wait, the first read of every event would find the
// socket empty (one system call an event, in vain). step must not take
// the socket's read lock (no other read or Close of the connection), and
// reads only this Conn in the pump. Pump returns the error that ended a
// wait (a deadline, the connection closed), which the next Read returns
// too, or nil when step was done. Pump only a Conn that is Pumpable.
func (c *Conn) Pump(step func() (more bool)) error {
	err := c.rc.Read(func(fd uintptr) bool {
		c.pumping, c.drained, c.fd = true, false, fd
		defer func() { c.pumping = false }() // also when step panics: later reads are the poller's again
		return !step()
	})
	c.waitErr = err
	return err
}

// Pumpable reports that a Watcher reports the socket's end (WatchEnd),
// which a pump needs to see an end that came behind its last bytes.
func (c *Conn) Pumpable() bool { return c.endWatched }

// readCall makes the read system call trap(fd, a1, a2) until it is not
// interrupted; false when the socket has nothing yet (the poller waits).
func (c *Conn) readCall(trap, fd, a1, a2 uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(trap, fd, a1, a2)
		switch errno {
		case 0:
			c.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = errno
		return true
	}
}

func (c *Conn) readOnce(fd uintptr) bool {
	return c.readCall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
}

// ended is the watcher's report that the peer ended the connection (FIN
// or RST). A short read does not take the end with the bytes before it: a
// pump that made one may be waiting for a readiness that came with those
// bytes and will not come again. From here on a pump reads after every
// short read (a pump that starts later sees peerEnded), and shutting the
// socket's reading side makes it ready again for one already waiting,
// which then reads the end. Callable from any goroutine, also after Close.
func (c *Conn) ended() {
	c.peerEnded.Store(true)
	_ = c.rc.Control(func(fd uintptr) {
		_ = syscall.Shutdown(int(fd), syscall.SHUT_RD)
	})
}

// Shutdown shuts the socket down both ways (shutdown(2)): the peer sees
// the end at once, and a read blocked on the socket, or a pump, ends. The
// end is ours: a pump reads on to it after a short read without waiting
// for the watcher's report. Callable from any goroutine; it fails only for
// a socket no longer connected, whose reads end anyway.
func (c *Conn) Shutdown() {
	c.peerEnded.Store(true)
	_ = c.rc.Control(func(fd uintptr) {
		_ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR)
	})
}

// StampReceives asks the kernel to timestamp what the socket receives
// (SO_TIMESTAMPNS), for ReadStamped; false when it refuses.
func (c *Conn) StampReceives() bool { return setStamping(c.rc) }

func setStamping(rc syscall.RawConn) bool { return setOptions(rc, stamping) == nil }

var stamping = []sockOption{{syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1}}

// StampListener asks for receive timestamps on a TCP listener too: the
// kernel turns them on for the whole stack a moment after the first socket
// asks, so asking at listen time has them on before the first request.
func StampListener(ln net.Listener) {
	if tl, ok := ln.(*net.TCPListener); ok {
		if rc, err := tl.SyscallConn(); err == nil {
			setStamping(rc)
		}
	}
}

// ReadStamped reads as Read does, with recvmsg, and returns how long the
// bytes had waited in the socket since the kernel received them (TCP
// gives the last segment's time); waited < 0 when the kernel gave no
// timestamp (StampReceives not asked, or not on yet).
func (c *Conn) ReadStamped(p []byte) (n int, waited time.Duration, err error) {
	if n, err = c.readWith(c.stampFn, "recvmsg", p); n == 0 {
		return n, -1, err
	}
	return n, c.receiveWait(time.Now()), nil
}

func (c *Conn) recvOnce(fd uintptr) bool {
	c.iov.Base = &c.rbuf[0]
	c.iov.SetLen(len(c.rbuf))
	c.msg = syscall.Msghdr{Iov: &c.iov, Iovlen: 1, Control: &c.oob[0]}
	c.msg.SetControllen(len(c.oob))
	return c.readCall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), 0)
}

// receiveWait is now minus the kernel's receive timestamp in the last
// recvmsg's control messages; -1 without one. It allocates nothing.
func (c *Conn) receiveWait(now time.Time) time.Duration {
	b := c.oob[:min(int(c.msg.Controllen), len(c.oob))]
	for len(b) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < syscall.SizeofCmsghdr || l > len(b) {
			break
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && l >= syscall.CmsgLen(int(unsafe.Sizeof(syscall.Timespec{}))) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&b[syscall.CmsgLen(0)]))
			return max(now.Sub(time.Unix(ts.Unix())), 0)
		}
		b = b[min(syscall.CmsgSpace(l-syscall.CmsgLen(0)), len(b)):]
	}
	return -1
}

// Write writes all of p as net.Conn.Write does, waiting for the socket to
// take more when its buffer is full (within the write deadline).
func (c *Conn) Write(p []byte) (int, error) {
	c.one[0] = p
	return c.WriteVec(c.one[:])
}

// WriteVec writes all of bufs (at most MaxWriteVec of them) in order, as
// Write does, gathered in writev calls: one call for all of them when the
// socket has room.
func (c *Conn) WriteVec(bufs [][]byte) (int, error) {
	c.wvec, c.wn, c.werr = bufs, 0, 0
	err := c.rc.Write(c.writeFn)
	n := c.wn
	c.wvec, c.one[0] = nil, nil
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case c.werr != 0:
		return n, c.opError("write", os.NewSyscallError("writev", c.werr))
	}
	return n, nil
}

func (c *Conn) writeGathered(fd uintptr) bool {
	for {
		var iov [MaxWriteVec]syscall.Iovec
		n, skip := 0, c.wn // skip what was written already
		for _, b := range c.wvec {
			if skip >= len(b) {
				skip -= len(b)
				continue
			}
			b, skip = b[skip:], 0
			iov[n].Base = &b[0]
			iov[n].SetLen(len(b))
			n++
		}
		if n == 0 {
			return true
		}
		w, _, errno := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
		switch errno {
		case 0:
			c.wn += int(w)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the poller waits for room
		default:
			c.werr = errno
			return true
		}
	}
}

// WaitReadable waits until conn has bytes to read (a client's next
// request), or its end or an error, or until timeout passes; true for
// bytes. It reads nothing (a peek under the poller).
func WaitReadable(conn net.Conn, timeout time.Duration) bool {
	rc := rawConn(conn)
	if rc == nil {
		return true
	}
	if conn.SetReadDeadline(time.Now().Add(timeout)) != nil {
		return false
	}
	defer conn.SetReadDeadline(time.Time{})
	var b [1]byte
	got := false
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK, 0, 0)
			switch errno {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			got = errno == 0 && n > 0
			return true
		}
	})
	return err == nil && got
}
