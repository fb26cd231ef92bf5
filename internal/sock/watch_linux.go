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
// upstream), that upstreams ended their connections (for a pump, which
// cannot see that end itself: WatchEnd), and that anything at all arrived
// on an idle pooled upstream connection (WatchIdle).
//
// It keeps one epoll instance, separate from Go's network poller, in which
// each watched socket is registered for EPOLLRDHUP only: the kernel wakes
// us when the peer sends FIN (EPOLLRDHUP) or RST (EPOLLHUP, EPOLLERR). An
// idle connection's registration is re-armed for EPOLLIN as well, for the
// time it is idle. Nothing is ever read from or written to the socket
// (an idle report peeks), so the server's use of the connection is
// undisturbed, and because the signal is the TCP
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
	entries map[uint64]*entry
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
	w := &Watcher{epfd: epfd, ep: ep, rc: rc, entries: make(map[uint64]*entry), next: 1,
		done: make(chan struct{}), events: make([]unix.EpollEvent, 128)}
	w.wait = w.collect
	go w.loop()
	return w, nil
}

// entry is one registration: gone is called at the peer's end; while idle
// (WatchIdle) is set, idle is called instead, at any byte or end. rearm,
// made at the first change of phase, re-arms it for its phase (so that
// later ones cost no allocation), and leaves its error in err.
type entry struct {
	gone  func()
	idle  func(bytes bool)
	rc    syscall.RawConn
	rearm func(fd uintptr)
	err   error
}

// An event's data is its registration's id shifted left by one, its low
// bit set when the registration was armed for an idle connection: an event
// the loop took before the registration changed phase is then told apart
// and dropped (the phase armed since reports anything still true, as a
// re-armed epoll registration reports what is ready at once).
const idleTag = 1

// arm (re-)arms the registration id on fd, one-shot (once the peer has gone
// the socket would otherwise be reported on every wait until unwatched,
// spinning the loop): for the peer's end only, or, idle, also for any
// byte (EPOLLIN).
func (w *Watcher) arm(op int, fd uintptr, id uint64, idle bool) error {
	events, key := uint32(unix.EPOLLRDHUP|unix.EPOLLONESHOT), id<<1
	if idle {
		events, key = events|unix.EPOLLIN, key|idleTag
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(uint32(key)), Pad: int32(uint32(key >> 32))}
	return epollCtl(w.epfd, op, fd, &ev)
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
	w.entries[id] = &entry{gone: gone, rc: rc}

	var err error
	ctlErr := rc.Control(func(fd uintptr) {
		err = w.arm(unix.EPOLL_CTL_ADD, fd, id, false)
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

// WatchIdle points the registration t at its connection's idle time (a
// pooled upstream connection between requests): the next byte or end that
// arrives calls idle once, from the watcher's goroutine, with bytes true
// when bytes are waiting (false: only the peer's end), instead of the
// registration's own callback, and ends the registration's reports
// (EndIdle then returns false). It returns false when the registration
// has already reported its peer's end: the connection is done, not idle.
// A zero Token (nothing watched) is idle at once: true.
func (w *Watcher) WatchIdle(t Token, idle func(bytes bool)) bool {
	return w.phase(t, idle)
}

// EndIdle points the registration t back at its peer's end only, for the
// connection's next request. It returns false when the idle callback was
// called or is being called: the connection is not to be used. Bytes that
// arrive after it returns are the next request's response as far as the
// watcher is concerned; the caller checks the socket is empty
// (Conn.Unread) after EndIdle, before it writes. A zero Token: true.
func (w *Watcher) EndIdle(t Token) bool {
	return w.phase(t, nil)
}

// phase re-arms t idle (with idle's callback) or for the end only (nil).
func (w *Watcher) phase(t Token, idle func(bool)) bool {
	if t.id == 0 {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[t.id]
	if w.closed || !ok || (idle == nil) == (e.idle == nil) {
		// Closed: nothing is reported any more, so nothing idle can be
		// trusted. Gone: reported. Already in that phase: a caller's bug,
		// answered as a connection not to use.
		return false
	}
	if e.rearm == nil {
		e.rearm = func(fd uintptr) { e.err = w.arm(unix.EPOLL_CTL_MOD, fd, t.id, e.idle != nil) }
	}
	before := e.idle
	e.idle, e.err = idle, nil
	if err := t.rc.Control(e.rearm); err != nil || e.err != nil {
		e.idle = before
		return false
	}
	return true
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
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			id, idle := key>>1, key&idleTag != 0
			w.mu.Lock()
			e, ok := w.entries[id]
			if ok = ok && idle == (e.idle != nil); ok { // else gone, or armed since for the other phase
				delete(w.entries, id) // report once
			}
			w.mu.Unlock()
			switch {
			case !ok:
			case idle:
				bytes := false
				if ev.Events&unix.EPOLLIN != 0 {
					_ = e.rc.Control(func(fd uintptr) { bytes, _ = peek(fd) })
				}
				e.idle(bytes)
			default:
				e.gone()
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
