package refengine

import (
	"os"
	"sync"
	"sync/atomic"
)

// waker wakes the handlers the scheduler has news for through the network
// poller, not from the scheduler's own goroutine.
//
// A goroutine woken by another (a channel send) waits in the run-next slot
// of the waking goroutine's processor, which the other processors take
// from only reluctantly, and the scheduler goes straight on to its next
// model step, which holds that processor for milliseconds: a handler woken
// directly by the scheduler waited 0.25–0.5 ms (median, idle engine) before
// it could write its first token, at times a whole step. A byte written to
// a pipe instead wakes the goroutine reading it through the poller, on an
// idle processor, in microseconds; it wakes the handlers there and blocks
// again, so they run there at once. One write per step that has news,
// whatever the number of handlers.
type waker struct {
	r, w *os.File
	mu   sync.Mutex
	due  []*request  // handlers to wake, in order
	next []*request  // the run goroutine's copy
	sent atomic.Bool // a byte is in the pipe, not yet read
}

func newWaker() (*waker, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &waker{r: r, w: w}, nil
}

// add queues r's handler to be woken at the next flush. Scheduler
// goroutine only.
func (k *waker) add(r *request) {
	k.mu.Lock()
	k.due = append(k.due, r)
	k.mu.Unlock()
}

// flush wakes the queued handlers: one byte in the pipe, unless one is
// already there. Scheduler goroutine only.
func (k *waker) flush() {
	k.mu.Lock()
	n := len(k.due)
	k.mu.Unlock()
	if n > 0 && k.sent.CompareAndSwap(false, true) {
		_, _ = k.w.Write([]byte{1})
	}
}

// run wakes the handlers queued before each byte, until close.
func (k *waker) run() {
	var b [64]byte
	for {
		if _, err := k.r.Read(b[:]); err != nil {
			return
		}
		k.sent.Store(false)
		k.mu.Lock()
		k.next, k.due = k.due, k.next[:0]
		k.mu.Unlock()
		for i, r := range k.next {
			r.signal()
			k.next[i] = nil
		}
	}
}

// close ends run, after waking every handler still queued.
func (k *waker) close() {
	_ = k.w.Close()
	k.mu.Lock()
	for _, r := range k.due {
		r.signal()
	}
	k.due = nil
	k.mu.Unlock()
}
