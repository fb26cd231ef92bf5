//go:build linux

package sock

import (
	"context"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Listen opens the TCP listener the proxy serves on. The sockets it
// accepts have TCP_NODELAY, as Go sets it on every TCP connection, and the
// TCP keep-alive Go gives accepted connections by default (a probe after
// 15 s of silence, then every 15 s, 9 unanswered ones end it), so
// half-open clients are found eventually, but without five system calls
// per connection: Linux copies these options from the listening socket to
// each socket it accepts, when its handshake completes, so they are set
// once, on the socket before it listens (a connection queued before then
// would have none of them), and Go's own per-connection keep-alive is
// turned off.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: setListenerOptions}
	return lc.Listen(context.Background(), "tcp", addr)
}

// acceptedOptions is what every socket Listen or RawListener accepts
// has: TCP_NODELAY on, as Go's net sets it on every TCP connection, and
// Go's default TCP keep-alive.
var acceptedOptions = []sockOption{
	{syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
}

func setListenerOptions(_, _ string, c syscall.RawConn) error {
	return setOptions(c, acceptedOptions)
}

// sockOption is one socket option's value.
type sockOption struct{ level, opt, value int }

// setOptions sets opts on rc's socket with raw setsockopt calls (a
// setsockopt never blocks; made raw, it wakes no monitor thread).
func setOptions(rc syscall.RawConn, opts []sockOption) error {
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) { errno = setRaw(fd, opts) }); err != nil {
		return err
	}
	if errno != 0 {
		return os.NewSyscallError("setsockopt", errno)
	}
	return nil
}

// hasOptions reports whether rc's socket has every option of opts.
func hasOptions(rc syscall.RawConn, opts []sockOption) bool {
	has := true
	err := rc.Control(func(fd uintptr) {
		for _, o := range opts {
			v, err := syscall.GetsockoptInt(int(fd), o.level, o.opt)
			has = has && err == nil && v == o.value
		}
	})
	return err == nil && has
}

// setRaw sets opts on the socket fd, in order, up to the first that fails.
func setRaw(fd uintptr, opts []sockOption) syscall.Errno {
	for _, o := range opts {
		v := int32(o.value)
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, uintptr(o.level), uintptr(o.opt),
			uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0); errno != 0 {
			return errno
		}
	}
	return 0
}
