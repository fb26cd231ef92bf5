//go:build linux

package sock

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher learns that clients went away while their requests are in
// flight, also when nothing is being written to them (prefill, a silent
// upstream), and that upstreams ended their connections (for a pump, which
// cannot see that end itself: WatchEnd).
//
// It keeps one epoll instance, separate from Go's network poller, in which
// each watched socket is registered for EPOLLRDHUP only: the kernel wakes
// us when the peer sends FIN (EPOLLRDHUP) or RST (EPOLLHUP, EPOLLERR).
// Nothing is ever read from or written to the socket, so the server's use
// of the connection is undisturbed, and because the signal is the TCP
// state, not data, it works for TLS clients as well (a close_notify alert
// in front of the FIN does not hide it). An idle watched socket costs no
// CPU. Each client connection is registered once, when accepted
// (WatchConn), and its registration is pointed at whichever request it is
// serving (Arm, Disarm), so a request costs no system call here.
//
// A client that half-closes its sending side on purpose while still reading
// is indistinguishable and counts as gone (as in nginx).
type Watcher struct {
	epfd int
	ep   *os.File        // epfd, waited on through Go's network poller
	rc   syscall.RawConn // ep's
	wait func(fd uintptr) bool

	mu      sync.Mutex
	next    uint64
	entries map[uint64]func()
	closed  bool // epfd is closed: watch and unwatch do nothing
	done    chan struct{}

	events []unix.EpollEvent // what the last wait returned (the loop's only)
	n      int
}

// NewWatcher starts a watcher. Its epoll instance is itself registered in
// Go's network poller (an epoll fd is readable while it has events ready),
// and the loop collects events with non-blocking raw waits: no thread sits
// in a blocking epoll_wait, so a disconnect wakes a parked goroutine rather
// than a thread that must then win back the scheduler's processor (with
// the monitor thread taking that processor away every time the wait
// blocks again).
func NewWatcher() (*Watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(epfd, true); err != nil { // so os.NewFile polls it
		unix.Close(epfd)
		return nil, err
	}
	ep := os.NewFile(uintptr(epfd), "epoll")
	// A file Go's poller does not watch has no deadlines: the loop would
	// end at its first wait.
	if err := ep.SetReadDeadline(time.Time{}); err != nil {
		ep.Close()
		return nil, fmt.Errorf("epoll instance not pollable: %w", err)
	}
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, err
	}
	w := &Watcher{epfd: epfd, ep: ep, rc: rc, entries: make(map[uint64]func()), next: 1,
		done: make(chan struct{}), events: make([]unix.EpollEvent, 128)}
	w.wait = w.collect
	go w.loop()
	return w, nil
}

// Token identifies one registration; the zero Token is none.
type Token struct {
	id uint64
	rc syscall.RawConn
}

// OK reports a registration made.
func (t Token) OK() bool { return t.id != 0 }

// Watch calls gone (once, from the watcher's goroutine) if the peer behind
// conn disconnects before Unwatch. It returns the zero Token when conn has
// no socket to watch (an in-memory pipe in tests, a wrapper hiding the fd).
func (w *Watcher) Watch(conn net.Conn, gone func()) Token {
	rc := rawConn(conn)
	if rc == nil {
		return Token{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return Token{}
	}
	id := w.next
	w.next++
	w.entries[id] = gone

	var err error
	ctlErr := rc.Control(func(fd uintptr) {
		// One-shot: once the peer has gone the socket would otherwise be
		// reported again on every wait until unwatch, spinning this loop.
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		err = epollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	})
	if err != nil || ctlErr != nil {
		delete(w.entries, id)
		return Token{}
	}
	return Token{id: id, rc: rc}
}

// WatchEnd registers c's socket so that its peer's end reaches a pump
// (Conn.Pumpable from then on). Unwatch the Token before closing c's
// connection.
func (w *Watcher) WatchEnd(c *Conn) Token {
	t := w.Watch(c.conn, c.ended)
	c.endWatched = t.OK()
	return t
}

// Unwatch stops watching. It must be called while the connection is still
// open (before it is closed or reused). A gone callback already taken by
// the loop may still run after Unwatch returns: callers make gone safe to
// run late.
func (w *Watcher) Unwatch(t Token) {
	if t.id == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	_ = t.rc.Control(func(fd uintptr) {
		_ = epollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	})
	delete(w.entries, t.id)
}

// epollCtl is unix.EpollCtl made raw: it never blocks (see Conn).
func epollCtl(epfd, op int, fd uintptr, ev *unix.EpollEvent) error {
	_, _, errno := syscall.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), fd, uintptr(unsafe.Pointer(ev)), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (w *Watcher) loop() {
	defer close(w.done)
	for {
		if err := w.rc.Read(w.wait); err != nil {
			return // closed
		}
		for i := range w.events[:w.n] {
			ev := &w.events[i]
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
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

// collect takes the events ready now without blocking; false (none) makes
// the poller wait until the epoll fd is readable. An error, which a valid
// epoll fd and buffer never give, counts as none.
func (w *Watcher) collect(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&w.events[0])), uintptr(len(w.events)), 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			n = 0
		}
		w.n = int(n)
		return n > 0
	}
}

// Close stops the loop and waits for it. Connections still in flight (a
// shutdown that timed out) may call Watch and Unwatch afterwards: they do
// nothing, so the closed epoll fd's number, which the process may reuse,
// is never touched.
func (w *Watcher) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	_ = w.ep.Close() // ends the loop's wait
	<-w.done
}
