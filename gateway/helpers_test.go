package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func okProbe(ctx context.Context, url string) error { return nil }

// fakeClock is a settable monotonic clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Duration      { return time.Duration(c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// newGateway builds a gateway for tests from a config in code, with a fake
// clock, an always-healthy probe and a silent logger unless opts say
// otherwise.
func newGateway(t testing.TB, cfg *Config, opts Options) (*Gateway, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	if opts.Probe == nil {
		opts.Probe = okProbe
	}
	if opts.Log == nil {
		nop := zerolog.Nop()
		opts.Log = &nop
	}
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	return g, clk
}

func onePool(upstreams ...string) []PoolConfig {
	return []PoolConfig{{Name: "p", Upstreams: upstreams}}
}
