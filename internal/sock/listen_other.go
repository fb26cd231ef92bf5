//go:build !linux

package sock

import "net"

// Listen opens the TCP listener the proxy serves on, with Go's default TCP
// keep-alive on every accepted connection.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
