package gateway

import (
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// admission is one upstream's admission control: at most max requests in
// flight, and a bounded FIFO of waiters, each waiting at most maxWait.
//
// A released slot goes straight to the head waiter (it never returns to the
// pool first), and a newcomer takes the fast path only when nobody waits, so
// nobody overtakes anyone: strict FIFO.
type admission struct {
	mu       sync.Mutex
	max      int // 0: unlimited
	size     int // most waiters
	maxWait  time.Duration
	inFlight int
	queued   int
	head     *waiter
	tail     *waiter
}

// waiter is one queued request. Waiters are pooled (Gateway.waiters) with
// their channel and timer: ready has room for the one grant, so granting
// never blocks; timeout receives when the timer, on the gateway's clock,
// fires.
type waiter struct {
	prev, next *waiter
	ready      chan struct{}
	timer      clock.Timer
	timeout    <-chan time.Time
	granted    bool
}

func (g *Gateway) newWaiter() any {
	t, ch := g.opts.Clock.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ready: make(chan struct{}, 1), timer: t, timeout: ch}
}

// configure applies (reloaded) limits and admits the waiters a higher limit
// makes room for.
func (q *admission) configure(maxInFlight, size int, maxWait time.Duration) {
	q.mu.Lock()
	q.max, q.size, q.maxWait = maxInFlight, size, maxWait
	for q.head != nil && (q.max == 0 || q.inFlight < q.max) {
		q.inFlight++
		q.grantHead()
	}
	q.mu.Unlock()
}

// grantHead hands a slot to the head waiter. q.mu is held.
func (q *admission) grantHead() {
	w := q.head
	q.unlink(w)
	w.granted = true
	w.ready <- struct{}{}
}

func (q *admission) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.queued--
}

// Acquire admits a request to u: at once when a slot is free and nobody
// waits, otherwise after waiting its turn in u's FIFO queue. cancel (nil:
// never) closing while queued means the client left: the waiter is removed
// and a 499 client_cancel Rejection returned (record phase: queued).
// Rejections: 503 queue_full when the queue is full (Retry-After 1), 503
// queue_timeout after queue_max_wait. Both are worker_failure: the pool
// cannot take the request now; neither is the client's fault, and 503 is
// what OpenAI clients retry. On success, call release exactly once when the
// upstream exchange is over (its connection closed or returned), from any
// goroutine; release stays valid across reloads. Acquire does not allocate
// when it does not wait.
func (u *Upstream) Acquire(cancel <-chan struct{}) (release func(), rej *Rejection) {
	q := &u.q
	u.outstanding.Add(1)
	q.mu.Lock()
	if q.head == nil && (q.max == 0 || q.inFlight < q.max) {
		q.inFlight++
		q.mu.Unlock()
		return u.releaseFn, nil
	}
	if q.queued >= q.size {
		q.mu.Unlock()
		u.leave()
		return nil, u.queueRejection(endreason.DetailQueueFull, "queue_full", "the admission queue of upstream "+u.Name+" is full")
	}
	w := u.g.waiters.Get().(*waiter)
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.queued++
	maxWait := q.maxWait
	q.mu.Unlock()

	w.timer.Reset(maxWait)
	cancelled := false
	select {
	case <-w.ready:
		u.putWaiter(w)
		return u.releaseFn, nil
	case <-cancel:
		cancelled = true
	case <-w.timeout:
	}
	q.mu.Lock()
	if w.granted {
		// Granted while we were giving up: the slot is ours.
		q.mu.Unlock()
		<-w.ready
		u.putWaiter(w)
		if !cancelled {
			return u.releaseFn, nil // a grant at the deadline still counts
		}
		u.release() // pass it on
		return nil, rejClientGone
	}
	q.unlink(w)
	q.mu.Unlock()
	u.putWaiter(w)
	u.leave()
	if cancelled {
		return nil, rejClientGone
	}
	return nil, u.queueRejection(endreason.DetailQueueTimeout, "queue_timeout",
		"waited "+maxWait.String()+" for upstream "+u.Name+" without a free slot")
}

func (u *Upstream) putWaiter(w *waiter) {
	w.timer.Stop()
	w.granted = false
	u.g.waiters.Put(w)
}

func (u *Upstream) queueRejection(d endreason.Detail, code, msg string) *Rejection {
	return &Rejection{
		Status: 503, RetryAfter: 1, Type: "server_error", Code: code, Message: msg,
		Reason: endreason.WorkerFailure, Detail: d,
	}
}

// release ends one admitted request: its slot goes to the head waiter, or
// back to the pool. A lowered limit (reload) is honoured by not handing on
// slots over it.
func (u *Upstream) release() {
	q := &u.q
	q.mu.Lock()
	if q.head != nil && (q.max == 0 || q.inFlight <= q.max) {
		q.grantHead()
	} else {
		q.inFlight--
	}
	q.mu.Unlock()
	u.leave()
}

// leave counts a request out of u's outstanding, and with share_routing
// tells the other replicas.
func (u *Upstream) leave() {
	n := u.outstanding.Add(-1)
	if u.leastTTFT.Load() {
		u.g.publishCount(u, n, 0)
	}
}

// QueueDepth returns how many requests wait for u (for the queue-depth
// gauge).
func (u *Upstream) QueueDepth() int {
	u.q.mu.Lock()
	defer u.q.mu.Unlock()
	return u.q.queued
}

// InFlight returns how many requests u has admitted and not yet released.
func (u *Upstream) InFlight() int {
	u.q.mu.Lock()
	defer u.q.mu.Unlock()
	return u.q.inFlight
}
