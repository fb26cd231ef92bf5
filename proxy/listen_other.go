//go:build !linux

package proxy

import "net"

// Listen opens the TCP listener Serve takes, with Go's default TCP
// keep-alive on every accepted connection.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
