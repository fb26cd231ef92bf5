//go:build linux

package proxy

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rawIO reads and writes a socket with raw system calls made inside its
// RawConn, so Go's poller still waits for readiness and the connection's
// deadlines and Close still apply. A raw call does not enter the
// scheduler's system-call state: Go's net package does, for every read and
// write, and the first such entry after the process was idle wakes the
// runtime's monitor thread (a futex wake, then a train of short sleeps).
// On one core, with an event every few hundred microseconds, that was
// several context switches per event. The socket is non-blocking, so a raw
// call never blocks. One goroutine at a time reads, and one writes.
type rawIO struct {
	conn    net.Conn // for the addresses in errors
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool

	rbuf []byte
	rn   int
	rerr syscall.Errno
	// In a pump (pump), reads are made on fd within the pump's one wait
	// for the socket; drained: the last one found the socket empty, so
	// the next returns errWouldBlock without a system call.
	pumping bool
	drained bool
	fd      uintptr
	// peerEnded: the watcher saw the peer end the connection (ended).
	peerEnded atomic.Bool
	// stamped reads (readStamped): recvmsg's header and control buffer,
	// kept here so that a read allocates nothing.
	stampFn func(fd uintptr) bool
	msg     syscall.Msghdr
	iov     syscall.Iovec
	oob     [64]byte
	wvec    [][]byte // what the write in progress writes, in order
	one     [1][]byte
	wn      int
	werr    syscall.Errno
}

// maxWriteVec bounds the buffers one writeVec gathers.
const maxWriteVec = 4

// newRawIO returns the raw reader and writer of conn's socket, nil when
// conn is not a TCP socket.
func newRawIO(conn net.Conn) *rawIO {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{conn: conn, rc: rc}
	r.readFn, r.writeFn, r.stampFn = r.readOnce, r.writeGathered, r.recvOnce
	return r
}

// read reads as net.Conn.Read does: io.EOF at the peer's end, *net.OpError
// otherwise.
func (r *rawIO) read(p []byte) (int, error) { return r.readWith(r.readFn, "read", p) }

// readWith reads into p with fn, the system call named call, under the
// poller.
func (r *rawIO) readWith(fn func(fd uintptr) bool, call string, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rbuf, r.rn, r.rerr = p, 0, 0
	var err error
	switch {
	case !r.pumping:
		err = r.rc.Read(fn)
	case r.drained && !r.peerEnded.Load(), !fn(r.fd):
		r.rbuf, r.drained = nil, true
		return 0, errWouldBlock
	case r.rn < len(p):
		// A stream socket's short read took all the bytes it held; not
		// its end, which the next read returns (see ended).
		r.drained = true
	}
	r.rbuf = nil
	switch {
	case err != nil:
		return 0, r.opError("read", err)
	case r.rerr != 0:
		return 0, r.opError("read", os.NewSyscallError(call, r.rerr))
	case r.rn == 0:
		return 0, io.EOF
	}
	return r.rn, nil
}

// pump calls step inside one wait of Go's poller for the socket, as long
// as step asks for more (true) after a read returned errWouldBlock. A
// read then waits for the socket's readiness without asking the socket
// first: RawConn.Read forgets a readiness it saw before it was called, so
// outside one such wait, the first read of every event would find the
// socket empty (one system call an event, in vain). step must not take
// the socket's read lock (no other read or Close of the connection), and
// reads only the socket in the pump. It returns the error that ended a
// wait (a deadline, the connection closed), nil when step was done.
func (r *rawIO) pump(step func() (more bool)) error {
	return r.rc.Read(func(fd uintptr) bool {
		r.pumping, r.drained, r.fd = true, false, fd
		defer func() { r.pumping = false }() // also when step panics: later reads are the poller's again
		return !step()
	})
}

// readCall makes the read system call trap(fd, a1, a2) until it is not
// interrupted; false when the socket has nothing yet (the poller waits).
func (r *rawIO) readCall(trap, fd, a1, a2 uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(trap, fd, a1, a2)
		switch errno {
		case 0:
			r.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.rerr = errno
		return true
	}
}

func (r *rawIO) readOnce(fd uintptr) bool {
	return r.readCall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rbuf[0])), uintptr(len(r.rbuf)))
}

// ended is the watcher's report that the peer ended the connection (FIN
// or RST). A short read does not take the end with the bytes before it: a
// pump that made one may be waiting for a readiness that came with those
// bytes and will not come again. From here on a pump reads after every
// short read (a pump that starts later sees peerEnded), and shutting the
// socket's reading side makes it ready again for one already waiting,
// which then reads the end. Callable from any goroutine, also after Close.
func (r *rawIO) ended() {
	r.peerEnded.Store(true)
	_ = r.rc.Control(func(fd uintptr) {
		_ = syscall.Shutdown(int(fd), syscall.SHUT_RD)
	})
}

// shutdown shuts the socket down both ways (shutdown(2)). The end is
// ours: a pump reads on to it after a short read without waiting for the
// watcher's report (ended). It fails only for a socket no longer
// connected, whose reads end anyway.
func (r *rawIO) shutdown() {
	r.peerEnded.Store(true)
	_ = r.rc.Control(func(fd uintptr) {
		_ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR)
	})
}

// stampReceives asks the kernel to timestamp what the socket receives
// (SO_TIMESTAMPNS), for readStamped; false when it refuses.
func (r *rawIO) stampReceives() bool {
	var serr error
	err := r.rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	return err == nil && serr == nil
}

// readStamped reads as read does, with recvmsg, and returns how long the
// bytes had waited in the socket since the kernel received them (TCP
// gives the last segment's time); waited < 0 when the kernel gave no
// timestamp (stampReceives not asked, or not on yet).
func (r *rawIO) readStamped(p []byte) (n int, waited time.Duration, err error) {
	if n, err = r.readWith(r.stampFn, "recvmsg", p); n == 0 {
		return n, -1, err
	}
	return n, r.receiveWait(time.Now()), nil
}

func (r *rawIO) recvOnce(fd uintptr) bool {
	r.iov.Base = &r.rbuf[0]
	r.iov.SetLen(len(r.rbuf))
	r.msg = syscall.Msghdr{Iov: &r.iov, Iovlen: 1, Control: &r.oob[0]}
	r.msg.SetControllen(len(r.oob))
	return r.readCall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), 0)
}

// receiveWait is now minus the kernel's receive timestamp in the last
// recvmsg's control messages; -1 without one. It allocates nothing.
func (r *rawIO) receiveWait(now time.Time) time.Duration {
	b := r.oob[:min(int(r.msg.Controllen), len(r.oob))]
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

// write writes all of p as net.Conn.Write does, waiting for the socket to
// take more when its buffer is full (within the write deadline).
func (r *rawIO) write(p []byte) (int, error) {
	r.one[0] = p
	return r.writeVec(r.one[:])
}

// writeVec writes all of bufs (at most maxWriteVec of them) in order, as
// write does, gathered in writev calls: one call for all of them when the
// socket has room.
func (r *rawIO) writeVec(bufs [][]byte) (int, error) {
	r.wvec, r.wn, r.werr = bufs, 0, 0
	err := r.rc.Write(r.writeFn)
	n := r.wn
	r.wvec, r.one[0] = nil, nil
	switch {
	case err != nil:
		return n, r.opError("write", err)
	case r.werr != 0:
		return n, r.opError("write", os.NewSyscallError("writev", r.werr))
	}
	return n, nil
}

func (r *rawIO) writeGathered(fd uintptr) bool {
	for {
		var iov [maxWriteVec]syscall.Iovec
		n, skip := 0, r.wn // skip what was written already
		for _, b := range r.wvec {
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
			r.wn += int(w)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the poller waits for room
		default:
			r.werr = errno
			return true
		}
	}
}

// opError wraps err as net.Conn's methods would; an error RawConn already
// wrapped (op "raw-read", "raw-write") is unwrapped first, so it reads
// "read tcp …: i/o timeout", not twice.
func (r *rawIO) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: r.conn.LocalAddr(), Addr: r.conn.RemoteAddr(), Err: err}
}

// rawClientConn is an accepted client connection read and written through
// rawIO: its request, its end, and the events of its streams.
type rawClientConn struct {
	*net.TCPConn
	raw *rawIO
}

func (c *rawClientConn) Read(p []byte) (int, error)  { return c.raw.read(p) }
func (c *rawClientConn) Write(p []byte) (int, error) { return c.raw.write(p) }

// rawWriter returns conn's raw writer, nil when it has none.
func rawWriter(conn net.Conn) *rawIO {
	if c, ok := conn.(*rawClientConn); ok {
		return c.raw
	}
	return nil
}

// rawClientListener hands out its TCP connections as rawClientConns.
type rawClientListener struct{ net.Listener }

func (ln rawClientListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if raw := newRawIO(tc); raw != nil {
			return &rawClientConn{TCPConn: tc, raw: raw}, nil
		}
	}
	return c, nil
}

// waitForRequest waits until conn has bytes to read (the client's next
// request), or its end or an error, or until timeout passes; true for
// bytes. It reads nothing (a peek under the poller).
func waitForRequest(conn net.Conn, timeout time.Duration) bool {
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
