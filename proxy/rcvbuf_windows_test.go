package proxy

import "syscall"

// setReceiveBuffer sets a socket's SO_RCVBUF, before it connects.
func setReceiveBuffer(fd uintptr, n int) {
	_ = syscall.SetsockoptInt(syscall.Handle(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}
