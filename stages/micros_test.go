package stages

import (
	"testing"
	"time"
)

func TestAppendMillis(t *testing.T) {
	f := func(us int64, want string) {
		t.Helper()
		if got := string(AppendMillis(nil, us)); got != want {
			t.Errorf("AppendMillis(%d) = %q, want %q", us, got, want)
		}
	}
	f(0, "0")
	f(1, "0.001")
	f(10, "0.01")
	f(12345, "12.345")
	f(12340, "12.34")
	f(3000, "3")
	f(-1500, "-1.5")
	f(1<<40, "1099511627.776")
}

func TestMicros(t *testing.T) {
	f := func(d time.Duration, want int64) {
		t.Helper()
		if got := Micros(d); got != want {
			t.Errorf("Micros(%d) = %d, want %d", d, got, want)
		}
	}
	f(0, 0)
	f(499, 0)
	f(500, 1)
	f(1499, 1)
	f(-500, -1)
	f(-499, 0)
}

// TestStageSumProperty builds random timelines (marks in order with random
// gaps, some missing; engine durations random, including negative and
// larger than the window) and checks the logged identity on each.
