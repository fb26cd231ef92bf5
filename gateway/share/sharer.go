package share

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// Transport carries messages between replicas.
type Transport interface {
	// Publish sends msgs, in order, to every replica subscribed (this one
	// too), in as few round trips as it can, and keeps none of them once
	// it returns (their buffers are reused). On an error some of them may
	// have gone.
	Publish(ctx context.Context, msgs [][]byte) error
	// Receive returns the next message, blocking until one comes, it
	// fails, or ctx ends.
	Receive(ctx context.Context) ([]byte, error)
	// Close ends the transport; Receive and Publish fail from then on.
	Close() error
}

// The Sharer's bounds: messages waiting to be published, the most
// published in one round trip, and how long the receiver waits after a
// failure. (A publish is bounded by its transport's own timeouts:
// go-redis's read and write timeouts, 3 s.)
const (
	queueSize  = 4096
	batchSize  = 256
	retryAfter = time.Second
)

// Stats are a Sharer's counts since New.
type Stats struct {
	Sent      uint64 // messages published
	Received  uint64 // other replicas' messages applied (counted once applied)
	Dropped   uint64 // messages not published: the queue was full, or the Sharer stopped
	Failed    uint64 // messages of a publish that failed (some may have gone), and receives that failed (Redis down, a timeout)
	Malformed uint64 // messages received that could not be read
}

// Sharer publishes this replica's commits and observations and applies
// the others'. Publish and PublishObserved are safe for concurrent use;
// Start and Stop are not.
type Sharer struct {
	t     Transport
	id    uint64 // this replica's, in its messages: its own are skipped
	apply Applier
	log   zerolog.Logger
	clock clock.Clock

	queue   chan *[]byte
	free    chan *[]byte // the buffers the publisher is done with, for Publish to fill again
	stop    context.CancelFunc
	stopped bool
	wg      sync.WaitGroup

	sent, received, dropped, failed, malformed atomic.Uint64
	// The last publish, and the last receive, failed (logged once a run).
	pubDown, recvDown atomic.Bool
}

// Applier takes the other replicas' messages, on the Sharer's receiving
// goroutine, one at a time; and, on its ticking goroutine, a Tick every
// TickEvery (from Start until Stop).
type Applier interface {
	ApplyCommit(*Commit)
	ApplyObserved(*Observed)
	Tick()
}

// TickEvery is how often Applier.Tick runs.
const TickEvery = 10 * time.Second

// NewID returns a replica id: a gateway draws one and gives it to every
// Sharer it makes, so that the others' counts by replica stay one.
func NewID() uint64 {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return binary.LittleEndian.Uint64(id[:])
}

// New returns a Sharer on t, publishing as the replica id, that hands each
// other replica's message to apply. c is the clock its retries and ticks
// wait on (nil: clock.Real). Start begins.
func New(t Transport, id uint64, apply Applier, log zerolog.Logger, c clock.Clock) *Sharer {
	if c == nil {
		c = clock.Real
	}
	return &Sharer{t: t, id: id, apply: apply, log: log, clock: c,
		queue: make(chan *[]byte, queueSize), free: make(chan *[]byte, queueSize)}
}

// Start runs the publisher, the receiver and the ticker, once: a Sharer
// started or stopped before does nothing.
func (s *Sharer) Start() {
	if s.stop != nil || s.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.wg.Go(func() { s.publish(ctx) })
	s.wg.Go(func() { s.receive(ctx) })
	s.wg.Go(func() {
		for clock.Sleep(ctx, s.clock, TickEvery, nil) {
			s.apply.Tick()
		}
	})
}

// Stop ends its goroutines, once they are done with the Applier, and
// closes the transport (started or not); what is still queued is dropped.
func (s *Sharer) Stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	if s.stop != nil {
		s.stop()
	}
	_ = s.t.Close() // ends a Receive or Publish blocked on the network
	s.wg.Wait()
	for {
		select {
		case b := <-s.queue:
			s.dropped.Add(1)
			s.put(b)
		default:
			return
		}
	}
}

// Publish queues c's message: it copies what it needs, never blocks, and
// allocates nothing once its buffers are warm. A full queue drops it.
func (s *Sharer) Publish(c *Commit) {
	b := s.buffer()
	*b = appendCommit(*b, s.id, c)
	s.enqueue(b)
}

// PublishObserved queues o's message as Publish does c's.
func (s *Sharer) PublishObserved(o *Observed) {
	b := s.buffer()
	*b = appendObserved(*b, s.id, o)
	s.enqueue(b)
}

// buffer is an empty buffer for a message: one the publisher is done
// with, or a new one.
func (s *Sharer) buffer() *[]byte {
	select {
	case b := <-s.free:
		*b = (*b)[:0]
		return b
	default:
		b := make([]byte, 0, maxCommit) // room for any commit: it never grows
		return &b
	}
}

// enqueue hands b to the publisher, or drops it when the queue is full.
func (s *Sharer) enqueue(b *[]byte) {
	select {
	case s.queue <- b:
	default:
		s.dropped.Add(1)
		s.put(b)
	}
}

// put keeps b for a later Publish, unless enough are kept.
func (s *Sharer) put(b *[]byte) {
	select {
	case s.free <- b:
	default:
	}
}

// Stats returns the counts so far.
func (s *Sharer) Stats() Stats {
	return Stats{Sent: s.sent.Load(), Received: s.received.Load(), Dropped: s.dropped.Load(),
		Failed: s.failed.Load(), Malformed: s.malformed.Load()}
}

// publish sends what is queued, each time all of it there is (up to
// batchSize) in one Transport.Publish: one round trip, however many
// requests were routed while the last was on the wire.
func (s *Sharer) publish(ctx context.Context) {
	bufs := make([]*[]byte, 0, batchSize)
	msgs := make([][]byte, 0, batchSize)
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-s.queue:
			bufs = append(bufs[:0], b)
		}
	drain:
		for len(bufs) < batchSize {
			select {
			case b := <-s.queue:
				bufs = append(bufs, b)
			default:
				break drain
			}
		}
		msgs = msgs[:0]
		for _, b := range bufs {
			msgs = append(msgs, *b)
		}
		err := s.t.Publish(ctx, msgs)
		clear(msgs)
		for _, b := range bufs {
			s.put(b)
		}
		n := uint64(len(bufs))
		switch {
		case err != nil && ctx.Err() != nil: // stopped while publishing
			s.dropped.Add(n)
		case !s.failedIf(ctx, err, n, &s.pubDown, "publish"):
			s.sent.Add(n)
		}
	}
}

func (s *Sharer) receive(ctx context.Context) {
	for {
		msg, err := s.t.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if s.failedIf(ctx, err, 1, &s.recvDown, "receive") {
			if !clock.Sleep(ctx, s.clock, retryAfter, nil) {
				return
			}
			continue
		}
		m, err := parseMessage(msg)
		switch {
		case err != nil:
			if s.malformed.Add(1) == 1 {
				s.log.Warn().Err(err).Msg("share_routing: a message could not be read (counted from now on: ttftlens_routing_share_messages_total{event=\"malformed\"})")
			}
		case m.from == s.id:
		case m.observed:
			s.apply.ApplyObserved(&m.obs)
			s.received.Add(1) // after: Received counts messages applied
		default:
			s.apply.ApplyCommit(&m.commit)
			s.received.Add(1)
		}
	}
}

// failedIf counts err, if any (not one of ctx ending), as n failed, and
// logs the first failure of a run of op's and the recovery after it
// (down: op's flag).
func (s *Sharer) failedIf(ctx context.Context, err error, n uint64, down *atomic.Bool, op string) bool {
	if err == nil {
		if down.CompareAndSwap(true, false) {
			s.log.Info().Str("op", op).Msg("share_routing: Redis answers again")
		}
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	s.failed.Add(n)
	if down.CompareAndSwap(false, true) {
		s.log.Warn().Err(err).Str("op", op).Msg("share_routing: Redis failed; this replica routes on what it sees itself until it answers again")
	}
	return true
}
