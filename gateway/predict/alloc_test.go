//go:build !race

package predict

import (
	"testing"
	"time"
)

// TestAllocs: Observe and Predict allocate nothing.
func TestAllocs(t *testing.T) {
	m := New(Config{})
	o := Observation{End: time.Second, FirstToken: true, PromptTokens: 800, CachedTokens: 200, CachedReported: true,
		Load: Load{Waiting: 2, EngineKnown: true, InFlight: 4}, Parts: Parts{time.Millisecond, time.Millisecond, 50 * time.Millisecond, 20 * time.Millisecond, 0, time.Millisecond}}
	if n := testing.AllocsPerRun(1000, func() {
		o.End += time.Millisecond
		m.Observe(o)
	}); n != 0 {
		t.Errorf("Observe: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, ok := m.Predict(2*time.Second, 1000, Expected{Cached: 300}, o.Load); !ok {
			t.Fatal("no prediction")
		}
	}); n != 0 {
		t.Errorf("Predict: %v allocs, want 0", n)
	}
}
