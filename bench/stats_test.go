package bench

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// TestBreakdownWindow checks the proxy-clocked upstream window: proxy TTFT
// less gateway and route, whatever the split inside it.
func TestBreakdownWindow(t *testing.T) {
	ms := time.Millisecond
	result := func(gateway, route, queue, prefill, unattributed, transport time.Duration) *Result {
		rec := &Record{HasTTFT: true}
		rec.Stages[stages.Gateway] = gateway
		rec.Stages[stages.Route] = route
		rec.Stages[stages.Queue] = queue
		rec.Stages[stages.Prefill] = prefill
		rec.Stages[stages.Unattributed] = unattributed
		rec.Stages[stages.Transport] = transport
		for _, d := range rec.Stages {
			rec.TTFT += d
		}
		return &Result{HasTTFT: true, TTFT: rec.TTFT + ms, Record: rec}
	}
	tests := []struct {
		name string
		in   []*Result
		want time.Duration
	}{
		{"one request", []*Result{result(ms, ms, 2*ms, 10*ms, ms, ms)}, 14 * ms},
		{"engine split moves, window does not", []*Result{result(0, 0, 0, 20*ms, 0, 0), result(0, 0, 15*ms, 5*ms, 0, 0), result(0, 0, 0, 0, 20*ms, 0)}, 20 * ms},
		{"gateway and route are outside it", []*Result{result(30*ms, 0, 0, 5*ms, 0, 0), result(0, 40*ms, 0, 6*ms, 0, 0), result(0, 0, 0, 7*ms, 0, 0)}, 6 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := breakdown(tt.in).MedianWindow; got != tt.want {
				t.Errorf("MedianWindow %v, want %v", got, tt.want)
			}
		})
	}
}
