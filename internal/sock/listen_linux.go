//go:build linux

package sock

import (
	"context"
	"net"
	"syscall"
)

// Listen opens the TCP listener the proxy serves on. Its clients' connections get
// the TCP keep-alive Go gives accepted connections by default (a probe
// after 15 s of silence, then every 15 s, 9 unanswered ones end it), so
// half-open clients are found eventually, but without four system calls
// per connection: Linux copies these options from the listening socket to
// each socket it accepts, so they are set once, on the listener, and Go's
// own per-connection setting is turned off.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: setListenerKeepAlive}
	return lc.Listen(context.Background(), "tcp", addr)
}

// listenerKeepAlive is what Listen sets on the listening socket.
var listenerKeepAlive = []struct{ level, opt, value int }{
	{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
	{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
}

func setListenerKeepAlive(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		for _, o := range listenerKeepAlive {
			if err = syscall.SetsockoptInt(int(fd), o.level, o.opt, o.value); err != nil {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	return err
}
