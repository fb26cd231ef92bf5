package gateway

import (
	"context"
	"sync/atomic"
	"time"
)

func okProbe(ctx context.Context, url string) error { return nil }

// fakeClock is a settable monotonic clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Duration      { return time.Duration(c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
