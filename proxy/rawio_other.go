//go:build !linux

package proxy

import (
	"net"
	"time"
)

// rawIO is Linux's; elsewhere connections are read and written as they are.
type rawIO struct{}

func newRawIO(net.Conn) *rawIO { return nil }

func (*rawIO) read([]byte) (int, error) { panic("proxy: no raw reads here") }
func (*rawIO) stampReceives() bool      { return false }
func (*rawIO) shutdown()                {}
func (*rawIO) ended()                   {}
func (*rawIO) readStamped([]byte) (int, time.Duration, error) {
	panic("proxy: no raw reads here")
}
func (*rawIO) write([]byte) (int, error) { panic("proxy: no raw writes here") }
func (*rawIO) pump(func() bool) error    { panic("proxy: no raw reads here") }
func (*rawIO) writeVec([][]byte) (int, error) {
	panic("proxy: no raw writes here")
}

// rawWriter: no connection has a raw writer here.
func rawWriter(net.Conn) *rawIO { return nil }

// rawClientListener hands out its connections as they are.
type rawClientListener struct{ net.Listener }

// waitForRequest does not wait here: fasthttp's read timeout then runs from
// the stream's end.
func waitForRequest(net.Conn, time.Duration) bool { return true }
