package clock

import (
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance moves it. It starts at 0.
// Its timers fire inside Advance, in the order of their times, with Now
// reading each one's time as it fires; an AfterFunc's f runs on Advance's
// goroutine, so when Advance returns, every f it ran has returned. Safe for
// concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Duration
	armed  map[*fakeTimer]struct{}
	change *sync.Cond // broadcast when a timer is armed
}

type fakeTimer struct {
	f  *Fake
	at time.Duration
	ch chan time.Time // NewTimer's, with room for its one value
	fn func()         // AfterFunc's
}

// Now returns the time Advance has moved the clock to.
func (f *Fake) Now() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer whose channel receives when Advance reaches d
// from now.
func (f *Fake) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t, t.ch
}

// AfterFunc returns a timer that runs fn when Advance reaches d from now.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the clock d forward, firing the timers due by then.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now + d
	for {
		var next *fakeTimer
		for t := range f.armed {
			if t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			break
		}
		delete(f.armed, next)
		f.now = max(f.now, next.at)
		if next.fn != nil {
			f.mu.Unlock()
			next.fn()
			f.mu.Lock()
			continue
		}
		next.ch <- time.Time{}.Add(next.at) // room: Reset and Stop drain it
	}
	f.now = end
	f.mu.Unlock()
}

// Armed returns how many timers are waiting to fire.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.armed)
}

// WaitArmed blocks until at least n timers are waiting to fire (a goroutine
// has started its wait), and returns the delay from now until the earliest.
func (f *Fake) WaitArmed(n int) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.change == nil {
		f.change = sync.NewCond(&f.mu)
	}
	for len(f.armed) < n {
		f.change.Wait()
	}
	next := time.Duration(-1)
	for t := range f.armed {
		if next < 0 || t.at-f.now < next {
			next = t.at - f.now
		}
	}
	return next
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := t.disarm()
	if f.armed == nil {
		f.armed = map[*fakeTimer]struct{}{}
	}
	t.at = f.now + max(d, 0)
	f.armed[t] = struct{}{}
	if f.change != nil {
		f.change.Broadcast()
	}
	return was
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.disarm()
}

// disarm removes t from the armed timers and drains its channel. f.mu is
// held.
func (t *fakeTimer) disarm() bool {
	_, was := t.f.armed[t]
	delete(t.f.armed, t)
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	return was
}
