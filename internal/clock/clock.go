// Package clock is the time that code which waits is given: Real, the
// machine's, by default, and Fake, which a test moves by hand so that
// timeouts, deadlines and backoffs are tested without waiting for them.
package clock

import (
	"context"
	"time"
)

// Clock is a monotonic clock with timers. Only differences between Now
// readings matter.
type Clock interface {
	// Now returns the time since the clock's origin.
	Now() time.Duration
	// NewTimer is time.NewTimer: ch receives once, d from now, unless the
	// timer is stopped; Reset and Stop leave no stale value in ch.
	NewTimer(d time.Duration) (t Timer, ch <-chan time.Time)
	// AfterFunc is time.AfterFunc: f runs once, d from now, unless the
	// timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer controls a timer a Clock made; a *time.Timer is one.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// Real is the machine's monotonic clock. Its timers are *time.Timer, so
// using it through Clock allocates nothing more than the time package does.
var Real Clock = realClock{}

type realClock struct{}

var origin = time.Now()

func (realClock) Now() time.Duration { return time.Since(origin) }

func (realClock) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Sleep waits d on c, or less when wake (nil: never) fires. It returns
// false when ctx ended first, or had already ended.
func Sleep(ctx context.Context, c Clock, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t, ch := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
	case <-wake:
	}
	return true
}
