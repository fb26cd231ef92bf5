//go:build !linux

package sock

import "net"

// Listen opens the TCP listener the proxy serves on, with Go's default TCP
// keep-alive on every accepted connection.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// RawListener hands out ln's TCP connections read and written through
// their Conn (Of finds it); others as they are.
func RawListener(ln net.Listener) net.Listener { return rawListener{ln} }
