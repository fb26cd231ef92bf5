//go:build linux

package refengine

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// stampReceives asks the kernel to timestamp what c receives
// (SO_TIMESTAMPNS), so that a request's first read can say how long its
// bytes waited in the socket. It returns c's raw connection, or nil when c
// is not a TCP socket or refuses.
func stampReceives(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil || !setStamping(rc) {
		return nil
	}
	return rc
}

// stampListener sets SO_TIMESTAMPNS on a TCP listener too: the kernel
// turns receive timestamps on for the whole stack, a moment later, when
// the first socket asks, so asking at listen time has them on before the
// first request arrives.
func stampListener(ln net.Listener) {
	if tl, ok := ln.(*net.TCPListener); ok {
		if rc, err := tl.SyscallConn(); err == nil {
			setStamping(rc)
		}
	}
}

func setStamping(rc syscall.RawConn) bool {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	return err == nil && serr == nil
}

// readStamped reads into p as net.Conn.Read does (waiting for data under
// the connection's deadline) with recvmsg, and returns how long the bytes
// read had waited in the socket since the kernel received them; -1 when
// the kernel gave no timestamp (it stamps nothing until timestamps are on).
func readStamped(c net.Conn, rc syscall.RawConn, p []byte) (n int, waited time.Duration, err error) {
	if len(p) == 0 {
		return 0, -1, nil
	}
	var oob [64]byte
	var oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), p, oob[:], 0)
			if rerr != syscall.EINTR {
				return rerr != syscall.EAGAIN
			}
		}
	})
	now := time.Now()
	if err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return 0, -1, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, -1, io.EOF
	}
	return n, receiveWait(oob[:oobn], now), nil
}

// receiveWait is now minus the kernel's receive timestamp in the control
// messages oob, at least 0; -1 without a timestamp.
func receiveWait(oob []byte, now time.Time) time.Duration {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
			return max(now.Sub(time.Unix(ts.Unix())), 0)
		}
	}
	return -1
}
