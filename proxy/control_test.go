package proxy

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// TestControlSeal: once a request is sealed (its response all handed out),
// aborts from other goroutines (the client watcher, a shutdown's cut, the
// deadline timer) do nothing, and its own failed write still aborts it;
// before the seal they all do.
func TestControlSeal(t *testing.T) {
	deadline := func(c *control, gen uint64) {
		clk := &clock.Fake{}
		c.arm(clk, gen, time.Second, func() (time.Duration, error) { return 0, errTTFTDeadline })
		clk.Advance(time.Second)
	}
	for _, tc := range []struct {
		name   string
		sealed bool
		abort  func(c *control, gen uint64)
		want   error
	}{
		{"the watcher, before the seal", false, func(c *control, gen uint64) { c.abort(gen, errClientGone) }, errClientGone},
		{"the watcher, after the seal", true, func(c *control, gen uint64) { c.abort(gen, errClientGone) }, nil},
		{"a shutdown's cut, after the seal", true, func(c *control, gen uint64) { c.abort(gen, errShutdown) }, nil},
		{"the deadline timer, before the seal", false, deadline, errTTFTDeadline},
		{"the deadline timer, after the seal", true, deadline, nil},
		{"its own write, after the seal", true, func(c *control, gen uint64) { c.failed(gen, errClientStalled) }, errClientStalled},
		{"its own write, for an earlier request", false, func(c *control, gen uint64) { c.failed(gen-1, errClientGone) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c control
			gen := c.begin(func() time.Duration { return 0 })
			if tc.sealed {
				c.seal()
			}
			tc.abort(&c, gen)
			if got := c.aborted(); got != tc.want {
				t.Errorf("cause %v, want %v", got, tc.want)
			}
			if _, _, cause := c.end(); cause != tc.want {
				t.Errorf("end: cause %v, want %v", cause, tc.want)
			}
		})
	}
}
