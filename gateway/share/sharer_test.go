package share

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// applied collects the messages a Sharer applies.
type applied struct {
	mu sync.Mutex
	c  []Commit
	o  []Observed
	ch chan struct{}
}

func newApplied() *applied { return &applied{ch: make(chan struct{}, 64)} }

func (a *applied) ApplyCommit(c *Commit) {
	a.mu.Lock()
	a.c = append(a.c, *c)
	a.mu.Unlock()
	a.ch <- struct{}{}
}

func (a *applied) Tick() {}

func (a *applied) ApplyObserved(o *Observed) {
	a.mu.Lock()
	a.o = append(a.o, *o)
	a.mu.Unlock()
	a.ch <- struct{}{}
}

// TestSharersApplyEachOthers: what replica A publishes (a commit, an
// observation), B applies, and A does not (it has it already); and the
// reverse.
func TestSharersApplyEachOthers(t *testing.T) {
	h := &Hub{}
	ga, gb := newApplied(), newApplied()
	a := New(h.Transport(), 1, ga, zerolog.Nop(), nil)
	b := New(h.Transport(), 2, gb, zerolog.Nop(), nil)
	a.Start()
	b.Start()

	ca := Commit{Upstream: "http://e1:8000", Computed: 1500, Work: 300 * time.Millisecond, Chain: []uint64{1, 2, 3}}
	a.Publish(&ca)
	<-gb.ch
	oa := Observed{Upstream: "http://e1:8000", Observation: predict.Observation{FirstToken: true, PromptTokens: 1500}}
	a.PublishObserved(&oa)
	<-gb.ch
	cb := Commit{Upstream: "http://e2:8000", Computed: 40}
	b.Publish(&cb)
	// A received its own message before B's (the hub delivers in order):
	// once B's is applied, A's own has been skipped.
	<-ga.ch
	a.Stop()
	b.Stop()
	if a.Stats().Sent != 2 || b.Stats().Sent != 1 {
		t.Fatalf("sent %d and %d, want 2 and 1", a.Stats().Sent, b.Stats().Sent)
	}
	if len(gb.o) != 1 || gb.o[0].Upstream != oa.Upstream || gb.o[0].Observation.PromptTokens != 1500 || !gb.o[0].Observation.FirstToken {
		t.Fatalf("B applied the observations %+v, want A's", gb.o)
	}
	if len(gb.c) != 1 || gb.c[0].Upstream != ca.Upstream || gb.c[0].Computed != 1500 || len(gb.c[0].Chain) != 3 {
		t.Fatalf("B applied %+v, want A's commit", gb.c)
	}
	if len(ga.c) != 1 || ga.c[0].Upstream != cb.Upstream {
		t.Fatalf("A applied %+v, want B's commit only", ga.c)
	}
	if s := b.Stats(); s.Received != 2 || s.Dropped != 0 || s.Failed != 0 {
		t.Fatalf("B's stats %+v", s)
	}
}

// TestPublishNeverBlocks: with the publisher not running, Publish fills
// the queue and then drops, counted; Stop drops what is queued.
func TestPublishNeverBlocks(t *testing.T) {
	s := New((&Hub{}).Transport(), 1, newApplied(), zerolog.Nop(), nil)
	c := Commit{Upstream: "http://e1:8000"}
	for range queueSize + 10 {
		s.Publish(&c)
	}
	if d := s.Stats().Dropped; d != 10 {
		t.Fatalf("dropped %d, want the 10 past the queue", d)
	}
	s.Start()
	s.Stop()
	if st := s.Stats(); st.Sent+st.Dropped != queueSize+10 {
		t.Fatalf("stats %+v: every message sent or dropped", st)
	}
}

// TestMalformedCounted: a message that cannot be read is counted, not
// applied, and the next one still is.
func TestMalformedCounted(t *testing.T) {
	h := &Hub{}
	got := newApplied()
	s := New(h.Transport(), 1, got, zerolog.Nop(), nil)
	s.Start()
	defer s.Stop()
	other := h.Transport()
	if err := other.Publish(context.Background(), [][]byte{[]byte("PUBLISH junk")}); err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(context.Background(), [][]byte{appendCommit(nil, 99, &Commit{Upstream: "http://e:1"})}); err != nil {
		t.Fatal(err)
	}
	<-got.ch
	for s.Stats().Received < 1 { // counted once applied
		runtime.Gosched()
	}
	if st := s.Stats(); st.Malformed != 1 || st.Received != 1 {
		t.Fatalf("stats %+v: want one malformed, one applied", st)
	}
}

// TestReceiveRetries: a failing Receive is counted and retried after
// retryAfter on the Sharer's clock, not in a busy loop.
func TestReceiveRetries(t *testing.T) {
	clk := &clock.Fake{}
	tr := &failingTransport{calls: make(chan struct{}, 8)}
	s := New(tr, 1, newApplied(), zerolog.Nop(), clk)
	s.Start()
	defer s.Stop()
	<-tr.calls
	if d := clk.WaitArmed(2); d != retryAfter { // the receiver's retry, and the ticker's tick, the sooner
		t.Fatalf("the receiver waits %v, want %v", d, retryAfter)
	}
	if st := s.Stats(); st.Failed != 1 {
		t.Fatalf("failed %d after one Receive, want 1", st.Failed)
	}
	clk.Advance(retryAfter)
	<-tr.calls
}

type failingTransport struct {
	calls  chan struct{}
	closed atomic.Bool
}

func (f *failingTransport) Publish(context.Context, [][]byte) error { return errors.New("down") }
func (f *failingTransport) Receive(ctx context.Context) ([]byte, error) {
	f.calls <- struct{}{}
	return nil, errors.New("connection refused")
}
func (f *failingTransport) Close() error { f.closed.Store(true); return nil }

// TestStopUnstarted: a Sharer stopped without being started closes its
// transport all the same (a hub's open transport that nobody reads would
// block the hub's publishers once full), and is not started again.
func TestStopUnstarted(t *testing.T) {
	tr := &failingTransport{calls: make(chan struct{}, 8)}
	s := New(tr, 1, newApplied(), zerolog.Nop(), nil)
	s.Stop()
	s.Start()
	if !tr.closed.Load() {
		t.Fatal("the transport of a Sharer stopped unstarted is open")
	}
	select {
	case <-tr.calls:
		t.Fatal("a stopped Sharer started receiving")
	default:
	}
}

// TestTicks: Tick runs every TickEvery on the Sharer's clock while it runs.
func TestTicks(t *testing.T) {
	clk := &clock.Fake{}
	a := &ticks{ch: make(chan struct{}, 4)}
	s := New((&Hub{}).Transport(), 1, a, zerolog.Nop(), clk)
	s.Start()
	defer s.Stop()
	for range 2 {
		for clk.WaitArmed(1) != TickEvery { // the ticker's wait, not the receiver's
			clk.Advance(0)
		}
		clk.Advance(TickEvery)
		<-a.ch
	}
}

type ticks struct {
	applied
	ch chan struct{}
}

func (a *ticks) Tick() { a.ch <- struct{}{} }

// TestPublishBatches: what is queued while a publish is on the wire goes
// in the next one, in order, up to batchSize a publish; Sent counts
// messages, and a failed publish counts each of its messages failed.
func TestPublishBatches(t *testing.T) {
	tr := &gatedTransport{calls: make(chan [][]byte, 4), gate: make(chan error)}
	s := New(tr, 1, newApplied(), zerolog.Nop(), nil)
	s.Start()
	defer s.Stop()
	s.Publish(&Commit{Upstream: "http://e:1"})
	calls := [][][]byte{<-tr.calls} // the publisher waits at the gate
	for i := range batchSize + 5 {
		s.Publish(&Commit{Upstream: "http://e:1", Computed: uint64(i + 1)})
	}
	for _, err := range []error{nil, errors.New("down"), nil} {
		tr.gate <- err
		if len(calls) < 3 {
			calls = append(calls, <-tr.calls)
		}
	}
	if got := []int{len(calls[0]), len(calls[1]), len(calls[2])}; got[0] != 1 || got[1] != batchSize || got[2] != 5 {
		t.Fatalf("publishes of %v messages, want 1, %d, 5", got, batchSize)
	}
	want := uint64(1)
	for _, c := range calls[1:] {
		for _, b := range c {
			m, err := parseMessage(b)
			if err != nil || m.commit.Computed != want {
				t.Fatalf("message %d: computed %d (%v): out of order", want, m.commit.Computed, err)
			}
			want++
		}
	}
	for s.Stats().Sent < 6 {
		runtime.Gosched()
	}
	if st := s.Stats(); st.Sent != 6 || st.Failed != batchSize || st.Dropped != 0 {
		t.Fatalf("stats %+v: want 6 sent, %d failed", st, batchSize)
	}
}

// gatedTransport hands each Publish's messages (copied) to calls, then
// returns what gate gives it.
type gatedTransport struct {
	calls chan [][]byte
	gate  chan error
}

func (g *gatedTransport) Publish(ctx context.Context, msgs [][]byte) error {
	c := make([][]byte, len(msgs))
	for i, m := range msgs {
		c[i] = append([]byte(nil), m...)
	}
	g.calls <- c
	select {
	case err := <-g.gate:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedTransport) Receive(ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (g *gatedTransport) Close() error { return nil }

// TestHubDeliversWhatHasRoom: a publish whose context ends while it
// delivers still delivers to every subscriber with room, and says so:
// the replica stopping as its message went out counted it dropped though
// the others had it (TestSharersApplyEachOthers failed under load, "sent
// 2 and 0"). With the context already done, twenty publishes to two
// subscribers each deliver both and report no error.
func TestHubDeliversWhatHasRoom(t *testing.T) {
	h := &Hub{}
	a, b := h.Transport(), h.Transport()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		if err := a.Publish(ctx, [][]byte{{byte(i)}}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for _, tr := range []Transport{a, b} {
		for i := range 20 {
			msg, err := tr.Receive(context.Background())
			if err != nil || len(msg) != 1 || msg[0] != byte(i) {
				t.Fatalf("message %d: %v, %v", i, msg, err)
			}
		}
	}
}
