package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollector: each upstream's queue depth, slots in flight and health
// (unhealthy or ejected is 0), labelled by the label function.
func TestCollector(t *testing.T) {
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools: []PoolConfig{{Name: "p", Upstreams: []string{"http://busy:1", "http://down:1", "http://ejected:1"},
			MaxInFlight: 1, QueueSize: 4, QueueMaxWait: time.Hour}},
	}
	g, clk := newGateway(t, cfg, Options{})
	ups := g.Snapshot().Pools()[0].Upstreams
	busy, down, ejected := ups[0], ups[1], ups[2]
	release, rej := busy.Acquire(nil)
	if rej != nil {
		t.Fatal(rej)
	}
	cancel := make(chan struct{})
	waiter := acquireAsync(busy, cancel)
	clk.WaitArmed(1) // the waiter's timer: it is queued
	down.healthy.Store(false)
	ejected.eject(1)

	label := func(u *Upstream) string { return strings.TrimSuffix(strings.TrimPrefix(u.Name, "http://"), ":1") }
	want := `
# HELP ttftlens_queue_depth Requests waiting in the upstream's admission queue.
# TYPE ttftlens_queue_depth gauge
ttftlens_queue_depth{upstream="busy"} 1
ttftlens_queue_depth{upstream="down"} 0
ttftlens_queue_depth{upstream="ejected"} 0
# HELP ttftlens_upstream_healthy 1 when the upstream is healthy and not ejected.
# TYPE ttftlens_upstream_healthy gauge
ttftlens_upstream_healthy{upstream="busy"} 1
ttftlens_upstream_healthy{upstream="down"} 0
ttftlens_upstream_healthy{upstream="ejected"} 0
# HELP ttftlens_upstream_in_flight Requests holding one of the upstream's admission slots.
# TYPE ttftlens_upstream_in_flight gauge
ttftlens_upstream_in_flight{upstream="busy"} 1
ttftlens_upstream_in_flight{upstream="down"} 0
ttftlens_upstream_in_flight{upstream="ejected"} 0
`
	if err := testutil.CollectAndCompare(NewCollector(g, label), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	close(cancel)
	<-waiter
	release()
}
