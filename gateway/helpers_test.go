package gateway

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/clock"
)

func okProbe(ctx context.Context, url string) error { return nil }

// newGateway builds a gateway for tests from a config in code, with a fake
// clock (returned), an always-healthy probe and a silent logger unless opts
// say otherwise.
func newGateway(t testing.TB, cfg *Config, opts Options) (*Gateway, *clock.Fake) {
	t.Helper()
	clk := &clock.Fake{}
	if opts.Clock == nil {
		opts.Clock = clk
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
