package refengine

import (
	"testing"
	"time"
)

// TestWaker: a flush wakes every handler added before it, and close wakes
// those added since the last flush and ends run.
func TestWaker(t *testing.T) {
	k, err := newWaker()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() { k.run(); close(ran) }()
	woken := func(r *request) bool {
		select {
		case <-r.notify:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	a, b, c := newRequest(), newRequest(), newRequest()
	k.add(a)
	k.add(b)
	k.flush()
	k.flush() // nothing new: no second byte needed
	if !woken(a) || !woken(b) {
		t.Fatal("a flush did not wake the handlers added before it")
	}
	k.add(c)
	k.close()
	if !woken(c) {
		t.Error("close did not wake the handler added after the last flush")
	}
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not end after close")
	}
	_ = k.r.Close()
}
