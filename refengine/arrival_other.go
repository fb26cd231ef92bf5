//go:build !linux

package refengine

import (
	"net"
	"syscall"
	"time"
)

// stampReceives is Linux's only: elsewhere a request's bytes are not known
// to have waited before their first read.
func stampReceives(net.Conn) syscall.RawConn { return nil }

func stampListener(net.Listener) {}

func readStamped(c net.Conn, _ syscall.RawConn, p []byte) (int, time.Duration, error) {
	n, err := c.Read(p)
	return n, -1, err
}
