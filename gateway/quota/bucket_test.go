package quota

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// nowOf is c as the package's clocks are: nanoseconds.
func nowOf(c *clock.Fake) func() int64 { return func() int64 { return int64(c.Now()) } }

// step is one admission: the clock advances, est tokens are admitted, and
// the reservation is settled.
type step struct {
	name    string
	advance time.Duration
	est     int
	settle  int           // -1: cancel; -2: leave open
	over    string        // the refusal's bucket; "": admitted
	wait    time.Duration // the refusal's wait, to the microsecond
}

// run runs steps against one Limiter on clk.
func run(t *testing.T, clk *clock.Fake, l Limiter, steps []step) {
	t.Helper()
	for _, s := range steps {
		clk.Advance(s.advance)
		res, ref := l.Admit(s.est)
		if ref.Over != s.over || (ref.Wait-s.wait).Abs() > time.Microsecond {
			t.Fatalf("%s: refusal %+v, want over %q wait %v", s.name, ref, s.over, s.wait)
		}
		if ref.Refused() {
			continue
		}
		switch s.settle {
		case -1:
			res.Cancel()
		case -2:
		default:
			res.Settle(s.settle)
		}
	}
}

func TestBucketRequests(t *testing.T) {
	clk := &clock.Fake{}
	b := NewBucket(Limit{Interval: time.Minute, Requests: 3}, nowOf(clk))
	run(t, clk, b, []step{
		{"1st", 0, 0, -2, "", 0},
		{"2nd", 0, 0, -2, "", 0},
		{"3rd", 0, 0, -2, "", 0},
		{"4th: one request refills every 20s", 0, 0, -2, "requests", 20 * time.Second},
		{"15s later", 15 * time.Second, 0, -2, "requests", 5 * time.Second},
		{"20s later", 5 * time.Second, 0, -2, "", 0},
		{"an hour idle refills to the burst", time.Hour, 0, -2, "", 0},
		{"burst 2", 0, 0, -2, "", 0},
		{"burst 3", 0, 0, -2, "", 0},
		{"not beyond", 0, 0, -2, "requests", 20 * time.Second},
	})
}

func TestBucketTokensSettle(t *testing.T) {
	clk := &clock.Fake{}
	b := NewBucket(Limit{Interval: time.Minute, Tokens: 1000}, nowOf(clk))
	run(t, clk, b, []step{
		{"reserve 600", 0, 600, 100, "", 0},                                                     // 600 held, settled at 100 → 900 left
		{"reserve 900", 0, 900, -2, "", 0},                                                      // 0 left
		{"nothing left", 0, 1, 0, "tokens", 60 * time.Millisecond},                              // 1 token at 1000/min
		{"30s later", 30 * time.Second, 500, -1, "", 0},                                         // 500 refilled; cancelled → back to 500
		{"over what is left", 0, 800, 0, "tokens", 18 * time.Second},                            // 300 short
		{"estimate over capacity waits for a full bucket", 30 * time.Second, 5000, 3000, "", 0}, // charged 1000, settled 3000 → debt −2000
		{"in debt", time.Minute, 1, 0, "tokens", 60060 * time.Millisecond},                      // −2000+1000 = −1000: 1001 short
		{"debt paid", 2 * time.Minute, 1, 1, "", 0},
	})
}

// TestZeroReservation: the zero reservation (no quota) does nothing.
func TestZeroReservation(t *testing.T) {
	Reservation{}.Settle(5)
	Reservation{}.Cancel()
	if (Reservation{}).Fallback() {
		t.Fatal("zero reservation is a fallback")
	}
}

// TestBucketConcurrent: racing admissions never admit more than the bucket
// holds.
func TestBucketConcurrent(t *testing.T) {
	clk := &clock.Fake{}
	b := NewBucket(Limit{Interval: time.Hour, Requests: 100, Tokens: 1000}, nowOf(clk))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if res, ref := b.Admit(5); !ref.Refused() {
					admitted.Add(1)
					res.Settle(5)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 100 {
		t.Fatalf("admitted %d, want exactly 100 (the request bucket)", n)
	}
}

// TestBucketConfigure: a new limit keeps the levels it can.
func TestBucketConfigure(t *testing.T) {
	clk := &clock.Fake{}
	b := NewBucket(Limit{Interval: time.Minute, Requests: 2}, nowOf(clk))
	run(t, clk, b, []step{{"1st", 0, 0, -2, "", 0}, {"2nd", 0, 0, -2, "", 0}})
	b.Configure(Limit{Interval: time.Minute, Requests: 3})
	run(t, clk, b, []step{{"spent before the new limit", 0, 0, -2, "requests", 20 * time.Second}})
}
