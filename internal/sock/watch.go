package sock

import (
	"net"
	"sync/atomic"
)

// ConnWatch is one client connection's registration, made when it is
// accepted and kept across its keep-alive requests, so a request costs no
// epoll_ctl: it only points the registration at itself (Arm) and away
// again (Disarm). Requests on one connection are sequential.
type ConnWatch struct {
	tok  Token
	gone atomic.Bool            // the client left (FIN or RST seen)
	cur  atomic.Pointer[func()] // the current request's callback; nil between requests
}

// WatchConn registers conn for its whole life; EndConn ends it. A
// connection whose socket cannot be watched gets a registration that never
// fires.
func (w *Watcher) WatchConn(conn net.Conn) *ConnWatch {
	cw := new(ConnWatch)
	cw.tok = w.Watch(conn, cw.fire)
	return cw
}

// EndConn ends a registration WatchConn made.
func (w *Watcher) EndConn(cw *ConnWatch) { w.Unwatch(cw.tok) }

func (cw *ConnWatch) fire() {
	cw.gone.Store(true)
	if f := cw.cur.Load(); f != nil {
		(*f)()
	}
}

// Arm makes gone the callback for the request now served. A client that
// left before (between requests, or while this one was being read) fires it
// at once: gone is set before cur is read in fire, and cur before gone is
// read here, so one of the two sees the other.
func (cw *ConnWatch) Arm(gone *func()) {
	cw.cur.Store(gone)
	if cw.gone.Load() {
		(*gone)()
	}
}

// Disarm detaches the finished request.
func (cw *ConnWatch) Disarm() { cw.cur.Store(nil) }
