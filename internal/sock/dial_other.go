//go:build !linux

package sock

import (
	"net"
	"net/netip"
	"time"
)

// Dial connects to addr within timeout (none when 0) through Go's net,
// with its TCP_NODELAY and default keep-alive. The connection is read and
// written through its Conn (Of finds it).
func Dial(addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr.String(), timeout)
	if err != nil {
		return nil, err
	}
	return &clientConn{TCPConn: c.(*net.TCPConn), raw: New(c)}, nil
}
