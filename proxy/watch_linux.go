//go:build linux

package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// watcher learns that clients went away while their requests are in flight,
// also when nothing is being written to them (prefill, a silent upstream).
//
// It keeps one epoll instance, separate from Go's network poller, in which
// each watched client socket is registered for EPOLLRDHUP only: the kernel
// wakes us when the peer sends FIN (EPOLLRDHUP) or RST (EPOLLHUP, EPOLLERR).
// Nothing is ever read from or written to the socket, so fasthttp's use of
// the connection is undisturbed, and because the signal is the TCP state,
// not data, it works for TLS clients as well (a close_notify alert in front
// of the FIN does not hide it). An idle watched socket costs no CPU.
// Each client connection is registered once, when accepted (watchConn), and
// its registration is pointed at whichever request it is serving (arm,
// disarm), so a request costs no system call here.
//
// A client that half-closes its sending side on purpose while still reading
// is indistinguishable and counts as gone (as in nginx).
type watcher struct {
	epfd int
	wake int // eventfd that ends the loop

	mu      sync.Mutex
	next    uint64
	entries map[uint64]func()
	closed  bool // epfd is closed: watch and unwatch do nothing
	done    chan struct{}
}

func newWatcher() (*watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, err
	}
	w := &watcher{epfd: epfd, wake: wake, entries: make(map[uint64]func()), next: 1, done: make(chan struct{})}
	go w.loop()
	return w, nil
}

// watchToken identifies one registration; zero means not registered.
type watchToken struct {
	id uint64
	rc syscall.RawConn
}

// watch calls gone (once, from the watcher's goroutine) if the client behind
// conn disconnects before unwatch. It returns a zero token when conn has no
// socket to watch (an in-memory pipe in tests, a wrapper hiding the fd).
func (w *watcher) watch(conn net.Conn, gone func()) watchToken {
	rc := rawConn(conn)
	if rc == nil {
		return watchToken{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return watchToken{}
	}
	id := w.next
	w.next++
	w.entries[id] = gone

	var err error
	ctlErr := rc.Control(func(fd uintptr) {
		// One-shot: once the peer has gone the socket would otherwise be
		// reported again on every wait until unwatch, spinning this loop.
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || ctlErr != nil {
		delete(w.entries, id)
		return watchToken{}
	}
	return watchToken{id: id, rc: rc}
}

// unwatch stops watching. It must be called while the connection is still
// open (before fasthttp closes or reuses it). A gone callback already taken
// by the loop may still run after unwatch returns: callers make gone safe to
// run late (control.abort checks the request's generation).
func (w *watcher) unwatch(t watchToken) {
	if t.id == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	_ = t.rc.Control(func(fd uintptr) {
		_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	delete(w.entries, t.id)
}

func (w *watcher) loop() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for i := range events[:n] {
			ev := &events[i]
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 { // the eventfd (registered with zero data)
				return
			}
			w.mu.Lock()
			gone, ok := w.entries[id]
			delete(w.entries, id) // report once
			w.mu.Unlock()
			if ok {
				gone()
			}
		}
	}
}

// close stops the loop and waits for it. Streams still in flight (a
// shutdown that timed out) may call watch and unwatch afterwards: they do
// nothing, so the closed epoll fd's number, which the process may reuse, is
// never touched.
func (w *watcher) close() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.wake, one[:])
	<-w.done
	w.mu.Lock()
	w.closed = true
	unix.Close(w.epfd)
	unix.Close(w.wake)
	w.mu.Unlock()
}

// rawConn finds the socket under conn, unwrapping TLS.
func rawConn(conn net.Conn) syscall.RawConn {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// connWatch is one client connection's registration, made when fasthttp
// accepts it and kept across its keep-alive requests, so a request costs no
// epoll_ctl: it only points the registration at itself (arm) and away again
// (disarm). Requests on one connection are sequential in fasthttp.
type connWatch struct {
	tok  watchToken
	gone atomic.Bool            // the client left (FIN or RST seen)
	cur  atomic.Pointer[func()] // the current request's callback; nil between requests
}

// watchConn registers conn for its whole life; endConn ends it.
func (w *watcher) watchConn(conn net.Conn) *connWatch {
	cw := new(connWatch)
	cw.tok = w.watch(conn, cw.fire)
	return cw
}

func (w *watcher) endConn(cw *connWatch) { w.unwatch(cw.tok) }

func (cw *connWatch) fire() {
	cw.gone.Store(true)
	if f := cw.cur.Load(); f != nil {
		(*f)()
	}
}

// arm makes gone the callback for the request now served. A client that
// left before (between requests, or while this one was being read) fires it
// at once: gone is set before cur is read in fire, and cur before gone is
// read here, so one of the two sees the other.
func (cw *connWatch) arm(gone *func()) {
	cw.cur.Store(gone)
	if cw.gone.Load() {
		(*gone)()
	}
}

// disarm detaches the finished request.
func (cw *connWatch) disarm() { cw.cur.Store(nil) }
