package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// Abort causes. The request's goroutine turns them into end-reason facts.
var (
	errClientGone    = errors.New("client disconnected")
	errTTFTDeadline  = &deadlineError{endreason.DetailTTFTDeadline, "no first token within the first-token deadline"}
	errTotalDeadline = &deadlineError{endreason.DetailTotalDeadline, "request exceeded its total deadline"}
	errIdleDeadline  = &deadlineError{endreason.DetailIdleDeadline, "upstream sent no content within the idle deadline"}
	errShutdown      = &deadlineError{endreason.DetailShutdown, "the proxy shut down before the response ended"}
	errClientStalled = errors.New("client took no bytes within the write stall limit")
)

type deadlineError struct {
	detail endreason.Detail
	msg    string
}

func (e *deadlineError) Error() string { return e.msg }

// control is the part of a request that other goroutines touch: the client
// watcher and the deadline timer abort it; the request's goroutine attaches
// and detaches the upstream connection. A generation number keeps a late
// callback from acting on the next request that reuses the exchange.
type control struct {
	mu        sync.Mutex
	gen       uint64
	active    bool
	clock     func() time.Duration // offset on the request's clock
	conn      net.Conn             // upstream connection abort cuts
	cause     error
	abortedAt time.Duration // when the abort was requested
	closedAt  time.Duration // when the upstream connection was cut for it (0: none was open)
	timer     clock.Timer
	abortCh   chan struct{} // closed by the abort, for waits that select on it
	// sealed: the response is all handed out; only the request's own
	// write failing still aborts it (failed).
	sealed bool
	// clientLeft is set with cause when the cause is the client's doing,
	// for the relay to check on every event without taking mu.
	clientLeft atomic.Bool
	// cut is set with any cause: the upstream connection is only shut
	// down, and what the kernel still holds of it would be readable, so
	// the body's reads check it (upstreamBody.Read) and end as a closed
	// connection's would.
	cut atomic.Bool
}

// begin readies c for a new request and returns its generation.
func (c *control) begin(clock func() time.Duration) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.active = true
	c.clock = clock
	c.conn, c.cause, c.abortedAt, c.closedAt, c.sealed = nil, nil, 0, 0, false
	c.clientLeft.Store(false)
	c.cut.Store(false)
	c.abortCh = make(chan struct{})
	return c.gen
}

// aborts returns a channel closed when the request is aborted: a wait in
// our admission queue selects on it.
func (c *control) aborts() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.abortCh
}

// end makes every later callback for this generation a no-op and stops the
// timer. It returns the abort cause and its times.
func (c *control) end() (abortedAt, closedAt time.Duration, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = false
	c.conn = nil
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	return c.abortedAt, c.closedAt, c.cause
}

// abort records cause (the first one wins) and cuts the attached upstream
// connection, so a blocked upstream read or header wait returns at once and
// the upstream sees the request go away. Callable from any goroutine.
func (c *control) abort(gen uint64, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || !c.active || c.cause != nil || c.sealed {
		return
	}
	c.abortLocked(cause)
}

// seal makes later aborts from other goroutines (the client watcher, the
// deadline timer, a shutdown's cut) no-ops: the response is all handed
// out, and a client that leaves once it has it did not cancel it.
func (c *control) seal() {
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
}

// failed is abort for the request's own write to the client failing,
// which counts also after seal.
func (c *control) failed(gen uint64, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || !c.active || c.cause != nil {
		return
	}
	c.abortLocked(cause)
}

func (c *control) abortLocked(cause error) {
	c.cause = cause
	c.clientLeft.Store(clientCause(cause))
	c.cut.Store(true)
	c.abortedAt = c.clock()
	close(c.abortCh)
	if c.conn != nil {
		cut(c.conn)
		c.closedAt = c.clock()
	}
}

// cut ends an upstream connection for an abort without waiting for its
// reader: a TCP socket is shut down, which the upstream sees at once and
// which ends a read blocked on it (Close would wait for a pump, which
// holds the connection's read lock while it relays events, and a pump may
// be waiting for c's lock); the request's goroutine closes it. A
// connection without a socket of its own is closed.
func cut(conn net.Conn) {
	if c := countedConn(conn); c != nil && c.raw != nil {
		c.raw.Shutdown()
		return
	}
	_ = conn.Close()
}

// attach makes conn the one abort cuts. When the request was aborted
// already it closes conn and returns false.
func (c *control) attach(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		_ = conn.Close()
		if c.closedAt == 0 {
			c.closedAt = c.clock()
		}
		return false
	}
	c.conn = conn
	return true
}

// detach forgets the upstream connection before it goes back to the pool, so
// a late abort cannot close a connection another request is using.
func (c *control) detach() {
	c.mu.Lock()
	c.conn = nil
	c.mu.Unlock()
}

// aborted returns the abort cause, nil when there was none.
func (c *control) aborted() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// rearm moves the deadline timer to fire after d, if it is running.
func (c *control) rearm(gen uint64, d time.Duration) {
	c.mu.Lock()
	if gen == c.gen && c.active && c.timer != nil {
		c.timer.Reset(d)
	}
	c.mu.Unlock()
}

// arm starts the deadline timer on clk. check runs on the timer's
// goroutine, under c's lock and only while this generation is active (so
// end, which takes the lock, waits for a running check and the request's
// state cannot be reused under it), and returns the abort cause, or the
// delay until it should look again. check must not call c's methods.
func (c *control) arm(clk clock.Clock, gen uint64, first time.Duration, check func() (time.Duration, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t clock.Timer
	t = clk.AfterFunc(first, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if gen != c.gen || !c.active || c.cause != nil || c.sealed {
			return
		}
		if again, cause := check(); cause != nil {
			c.abortLocked(cause)
		} else {
			t.Reset(again)
		}
	})
	c.timer = t
}
