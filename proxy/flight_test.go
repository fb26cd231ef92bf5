package proxy

import (
	"fmt"
	"testing"
)

// flightStep is one thing the proxy sees of a request, in the order it sees
// it: "begin" (sent at at), "first" (its first token arrived at at),
// "end" (it ended at at), "cancel" (it never reached the engine).
type flightStep struct {
	op  string
	req int
	at  int64
}

func TestFlightSlotWait(t *testing.T) {
	steps := func(s ...flightStep) []flightStep { return s }
	b := func(req int, at int64) flightStep { return flightStep{"begin", req, at} }
	f := func(req int, at int64) flightStep { return flightStep{"first", req, at} }
	e := func(req int, at int64) flightStep { return flightStep{"end", req, at} }
	// serial4 is a one-slot engine serving four requests sent together,
	// each 10 ms of prefill and 40 of decode.
	serial4 := steps(b(0, 0), b(1, 0), b(2, 0), b(3, 0),
		f(0, 10), e(0, 50), f(1, 60), e(1, 100), f(2, 110), e(2, 150), f(3, 160), e(3, 200))
	// wide2 shows the engine generating two at once, flightSeen times
	// (requests 10 on, which wait for nothing).
	var wide2 []flightStep
	for i := range flightSeen {
		r, at := 10+2*i, int64(-100+10*i)
		wide2 = append(wide2, b(r, at), b(r+1, at), f(r, at+1), f(r+1, at+2), e(r, at+3), e(r+1, at+4))
	}
	tests := []struct {
		name  string
		steps []flightStep
		want  map[int]int64 // the inferred wait per request; absent: none
	}{
		{"serial: each waits for the ones ahead", serial4, map[int]int64{1: 50, 2: 100, 3: 150}},
		{"serial, sent one by one while the first generates",
			steps(b(0, 0), f(0, 10), b(1, 20), e(0, 50), f(1, 60), b(2, 70), e(1, 100), f(2, 110), e(2, 150)),
			map[int]int64{1: 30, 2: 30}},
		{"serial, the engine took them in another order than they were sent",
			steps(b(0, 0), b(1, 0), b(2, 0), f(0, 10), e(0, 50), f(2, 60), e(2, 100), f(1, 110), e(1, 150)),
			map[int]int64{1: 100, 2: 50}},
		{"nothing ahead", steps(b(0, 0), f(0, 10), e(0, 50), b(1, 60), f(1, 70), e(1, 90)), map[int]int64{}},
		{"two slots: the third waits for the first end, the fourth for the second",
			append(wide2, b(0, 0), b(1, 0), b(2, 0), b(3, 0), f(0, 10), f(1, 12), e(0, 50), e(1, 55), f(2, 62), f(3, 65), e(2, 100), e(3, 110)),
			map[int]int64{2: 50, 3: 55}},
		{"two at once seen only once: still one slot, and the fourth's wait unknown (the third ended after its first token)",
			steps(b(0, 0), b(1, 0), b(2, 0), b(3, 0), f(0, 10), f(1, 12), e(0, 50), e(1, 55), f(2, 62), f(3, 65), e(2, 100), e(3, 110)),
			map[int]int64{2: 55}},
		{"an end read after the next first token arrived: no wait inferred",
			steps(b(0, 0), b(1, 0), f(0, 10), f(1, 60), e(0, 65), e(1, 100)), map[int]int64{}},
		{"batching engine: both generate at once, nobody waited",
			steps(b(0, 0), b(1, 0), f(0, 10), f(1, 11), e(0, 50), e(1, 51)), map[int]int64{}},
		{"the end came after the first token: the engine served it sooner",
			steps(b(0, 0), b(1, 0), f(0, 10), e(0, 30), f(1, 15), e(1, 40)), map[int]int64{}},
		{"the request ahead had not ended", steps(b(0, 0), b(1, 0), f(0, 10), f(1, 60), e(1, 70), e(0, 80)), map[int]int64{}},
		{"a cancelled send is not ahead, nor an end",
			steps(b(0, 0), flightStep{"cancel", 0, 0}, b(1, 5), f(1, 10), e(1, 40), b(2, 45), f(2, 50), e(2, 60)), map[int]int64{}},
		{"an end before the send is no wait",
			steps(b(0, 10), b(1, 20), f(0, 12), e(0, 15), f(1, 30), e(1, 40)), map[int]int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := runFlight(t, new(flight), tc.steps)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("waits %v, want %v", got, tc.want)
			}
		})
	}
}

// runFlight plays steps on fl and returns each ended request's inferred
// wait (by request), asked at its end as the proxy does.
func runFlight(t *testing.T, fl *flight, steps []flightStep) map[int]int64 {
	t.Helper()
	tickets := map[int]*flightTicket{}
	sent, first := map[int]int64{}, map[int]int64{}
	waits := map[int]int64{}
	for _, s := range steps {
		switch s.op {
		case "begin":
			tickets[s.req] = new(flightTicket)
			fl.begin(tickets[s.req])
			sent[s.req] = s.at
		case "first":
			tickets[s.req].firstToken()
			first[s.req] = s.at
		case "cancel":
			tickets[s.req].cancel()
		case "end":
			tk := tickets[s.req]
			tk.end(s.at)
			tk.end(s.at + 1) // once
			if w, ok := tk.slotWait(sent[s.req], first[s.req]); ok {
				waits[s.req] = int64(w)
			}
		default:
			t.Fatalf("step %q", s.op)
		}
	}
	if fl.inFlight != 0 || fl.generating != 0 {
		t.Errorf("after every end: %d in flight, %d generating", fl.inFlight, fl.generating)
	}
	return waits
}

// TestFlightCapacity: a width seen once (an end the proxy parsed late) is
// not the engine's capacity; one seen flightSeen times is, and it is
// forgotten after flightSamples first tokens.
func TestFlightCapacity(t *testing.T) {
	fl := new(flight)
	pair := func() { // two generating at once
		var a, b flightTicket
		fl.begin(&a)
		fl.begin(&b)
		a.firstToken()
		b.firstToken()
		a.end(1)
		b.end(2)
	}
	for i := range flightSeen {
		if c := fl.capacity(); c != 1 {
			t.Fatalf("capacity %d after two at once %d times, want 1 until %d", c, i, flightSeen)
		}
		pair()
	}
	if c := fl.capacity(); c != 2 {
		t.Fatalf("capacity %d after two at once %d times, want 2", c, flightSeen)
	}
	for i := range flightSamples {
		var x flightTicket
		fl.begin(&x)
		x.firstToken()
		x.end(int64(10 + i))
	}
	if c := fl.capacity(); c != 1 {
		t.Errorf("capacity %d after %d serial first tokens, want 1", c, flightSamples)
	}
}

// TestFlightEndsTooFarBack: nothing is inferred for a request during which
// more than flightEnds others ended: the ends it would look at are gone.
func TestFlightEndsTooFarBack(t *testing.T) {
	for _, others := range []int{flightEnds - 2, flightEnds - 1} {
		fl := new(flight)
		var a, b flightTicket
		fl.begin(&a)
		fl.begin(&b)
		a.firstToken()
		a.end(50)
		for range others { // sent after b, ended before its first token (it failed, say)
			var x flightTicket
			fl.begin(&x)
			x.end(60)
		}
		b.firstToken()
		b.end(100)
		w, ok := b.slotWait(0, 70)
		if want := others < flightEnds-1; ok != want || ok && w != 60 {
			t.Errorf("%d ends after: wait %v, %v; want %v", others, w, ok, want)
		}
	}
}

func TestFlightAllocs(t *testing.T) {
	fl := new(flight)
	var a, b flightTicket
	if n := testing.AllocsPerRun(100, func() {
		fl.begin(&a)
		fl.begin(&b)
		a.firstToken()
		a.end(10)
		b.firstToken()
		b.end(20)
		_, _ = b.slotWait(0, 15)
	}); n != 0 {
		t.Errorf("%v allocations per request pair", n)
	}
}
