package share

import (
	"context"
	"errors"
	"sync"
)

// Hub is pub/sub in memory: every message published on one of its
// Transports goes to all of them, the publisher's too, in order, as Redis
// delivers a channel's. For tests, and replicas in one process.
type Hub struct {
	mu   sync.Mutex
	subs []*hubTransport
}

// hubBuffer is the messages a hub Transport holds for its Receive; a
// Publish waits while one is full.
const hubBuffer = 256

// Transport returns a new Transport on h.
func (h *Hub) Transport() Transport {
	t := &hubTransport{h: h, in: make(chan []byte, hubBuffer), closed: make(chan struct{})}
	h.mu.Lock()
	h.subs = append(h.subs, t)
	h.mu.Unlock()
	return t
}

type hubTransport struct {
	h      *Hub
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

var errClosed = errors.New("share: transport closed")

func (t *hubTransport) Publish(ctx context.Context, msgs [][]byte) error {
	select {
	case <-t.closed:
		return errClosed
	default:
	}
	t.h.mu.Lock()
	subs := t.h.subs
	t.h.mu.Unlock()
	for _, msg := range msgs {
		for _, s := range subs {
			m := append([]byte(nil), msg...)
			// Delivered at once where there is room, whatever ctx says: a
			// publish stopped half-way through its subscribers, some of
			// which had the message, would be counted as never sent.
			select {
			case s.in <- m:
				continue
			default:
			}
			select {
			case s.in <- m:
			case <-s.closed: // gone: nothing for it
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (t *hubTransport) Receive(ctx context.Context) ([]byte, error) {
	select {
	case m := <-t.in:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.closed:
		return nil, errClosed
	}
}

func (t *hubTransport) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}
