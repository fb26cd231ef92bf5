//go:build linux

package sock

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Dial connects to addr within timeout (none when 0) with raw
// non-blocking calls, waiting for the connection in Go's poller, none
// through the scheduler's system-call state (see tcpConn). The connection
// is read and written through its Conn (Of finds it) and has TCP_NODELAY
// and TCP keep-alive (a probe after 15 s of silence, then every 15 s, as
// many unanswered as the system's default, 9, end it). Its errors are
// net.Dial's: a *net.OpError with the connect's errno
// (syscall.ECONNREFUSED), os.ErrDeadlineExceeded past the timeout.
func Dial(addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	raddr := net.TCPAddrFromAddrPort(addr)
	d := dialing{}
	family := d.sockaddr(addr)
	fd, _, errno := syscall.RawSyscall(syscall.SYS_SOCKET, uintptr(family), syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if errno != 0 {
		return nil, dialErr(raddr, os.NewSyscallError("socket", errno))
	}
	if errno = setRaw(fd, dialOptions); errno != 0 {
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0) // not in the poller yet
		return nil, dialErr(raddr, os.NewSyscallError("setsockopt", errno))
	}
	c, err := newTCPConn(int(fd), nil, raddr)
	if err != nil {
		return nil, dialErr(raddr, err)
	}
	if timeout > 0 {
		_ = c.f.SetWriteDeadline(time.Now().Add(timeout))
	}
	// The socket is in the poller before its connect starts, so the
	// poller sees the connection's readiness come, whenever it comes.
	if err = c.rc.Write(d.connect); err == nil && d.errno != 0 {
		err = os.NewSyscallError("connect", d.errno)
	}
	if err == nil {
		err = c.f.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.Close()
		if oe, ok := err.(*net.OpError); ok {
			err = oe.Err
		}
		return nil, dialErr(raddr, err)
	}
	return c, nil
}

// dialOptions is what Dial sets on a socket before it connects: no delay
// for small writes (as Go's net), keep-alive, so that an engine gone
// without a word (its machine lost) is found also when no watchdog is on
// or an idle one is longer than a middlebox's patience (a cloud load
// balancer drops a silent connection after 4 to 10 minutes), at Go's
// default idle and interval; the count of probes is the system's.
var dialOptions = []sockOption{
	{syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
}

// dialing is one Dial's connect: the address, and how it ended.
type dialing struct {
	sa      syscall.RawSockaddrAny
	salen   uintptr
	started bool
	errno   syscall.Errno
}

// sockaddr fills d.sa with addr and returns its address family.
func (d *dialing) sockaddr(addr netip.AddrPort) int {
	port := addr.Port()
	if a := addr.Addr(); a.Is4() || a.Is4In6() {
		in := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&d.sa))
		in.Family, in.Addr = syscall.AF_INET, a.Unmap().As4()
		setNetPort(&in.Port, port)
		d.salen = syscall.SizeofSockaddrInet4
		return syscall.AF_INET
	}
	in := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&d.sa))
	in.Family, in.Addr = syscall.AF_INET6, addr.Addr().As16()
	setNetPort(&in.Port, port)
	if z := addr.Addr().Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			in.Scope_id = uint32(ifi.Index)
		}
	}
	d.salen = syscall.SizeofSockaddrInet6
	return syscall.AF_INET6
}

// connect starts the connection on the socket fd at its first call, and
// asks how it goes at the next ones, made when the poller saw the socket
// change (a second connect answers without waiting: EALREADY while the
// handshake runs, 0 once connected, the failure's errno). False: wait.
func (d *dialing) connect(fd uintptr) bool {
	for {
		_, _, errno := syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&d.sa)), d.salen)
		first := !d.started
		d.started = true
		switch errno {
		case 0, syscall.EISCONN:
			return true
		case syscall.EINTR:
			if first {
				return false // the connect goes on in the kernel
			}
			continue
		case syscall.EINPROGRESS, syscall.EALREADY:
			return false
		}
		d.errno = errno
		return true
	}
}

func setNetPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func dialErr(raddr *net.TCPAddr, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
}
