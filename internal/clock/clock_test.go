package clock

import (
	"context"
	"testing"
	"time"
)

// TestFakeOrder: Advance fires due timers in the order of their times, each
// with Now at its time, and leaves the others armed; Stop and Reset
// disarm and drain.
func TestFakeOrder(t *testing.T) {
	var f Fake
	var fired []time.Duration
	at := func() { fired = append(fired, f.Now()) }
	f.AfterFunc(30*time.Millisecond, at)
	f.AfterFunc(10*time.Millisecond, at)
	stopped := f.AfterFunc(20*time.Millisecond, at)
	tm, ch := f.NewTimer(15 * time.Millisecond)
	late := f.AfterFunc(time.Second, at)
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	f.Advance(30 * time.Millisecond)
	if want := []time.Duration{10 * time.Millisecond, 30 * time.Millisecond}; len(fired) != 2 || fired[0] != want[0] || fired[1] != want[1] {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
	if f.Now() != 30*time.Millisecond || f.Armed() != 1 {
		t.Fatalf("now %v, %d armed; want 30ms, 1 (the late one)", f.Now(), f.Armed())
	}
	if tm.Reset(time.Millisecond) {
		t.Error("Reset of a fired timer returned true")
	}
	select {
	case <-ch:
		t.Fatal("a stale value after Reset")
	default:
	}
	f.Advance(time.Millisecond)
	<-ch
	late.Stop()
}

// TestSleep: Sleep returns true when the clock reaches d or wake fires,
// false when ctx ends, and WaitArmed sees the sleeper's timer.
func TestSleep(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		end  func(f *Fake, wake chan struct{})
		want bool
	}{
		{"time passes", context.Background(), func(f *Fake, _ chan struct{}) { f.Advance(time.Second) }, true},
		{"woken", context.Background(), func(_ *Fake, wake chan struct{}) { wake <- struct{}{} }, true},
		{"ctx ended", cancelled, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, wake, got := &Fake{}, make(chan struct{}), make(chan bool)
			go func() { got <- Sleep(tt.ctx, f, time.Second, wake) }()
			if tt.end != nil {
				if d := f.WaitArmed(1); d != time.Second {
					t.Errorf("sleeper armed a timer %v away, want 1s", d)
				}
				tt.end(f, wake)
			}
			if g := <-got; g != tt.want {
				t.Errorf("Sleep returned %v, want %v", g, tt.want)
			}
		})
	}
}

// TestRealSleep: the real clock's timers fire.
func TestRealSleep(t *testing.T) {
	if !Sleep(context.Background(), Real, time.Millisecond, nil) {
		t.Fatal("Sleep on Real returned false")
	}
}
