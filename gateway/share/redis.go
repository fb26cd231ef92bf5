package share

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisTransport is Redis pub/sub on one channel.
type redisTransport struct {
	client  *redis.Client
	channel string

	mu     sync.Mutex
	sub    *redis.PubSub // made by a Receive; nil after one failed
	closed bool
}

// NewRedis returns a Transport publishing to and subscribed on channel of
// the Redis server opts reach. It connects on first use (the subscription
// on the first Receive); after a Receive fails, the next subscribes anew
// (the server may have restarted, and forgotten the subscription). Close
// ends a Receive blocked waiting. A publish is never retried, whatever
// opts say: a pipeline retried after a timeout would send again what had
// gone, and the other replicas would count it twice (a lost message is
// put right by the next counts).
func NewRedis(opts *redis.Options, channel string) Transport {
	o := *opts
	o.MaxRetries = -1
	return &redisTransport{client: redis.NewClient(&o), channel: channel}
}

// Publish sends one message as a PUBLISH, and more as PUBLISHes in one
// pipeline: one round trip. Its error is the first command's that failed.
func (r *redisTransport) Publish(ctx context.Context, msgs [][]byte) error {
	if len(msgs) == 1 {
		return r.client.Publish(ctx, r.channel, msgs[0]).Err()
	}
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			p.Publish(ctx, r.channel, m)
		}
		return nil
	})
	return err
}

func (r *redisTransport) Receive(ctx context.Context) ([]byte, error) {
	r.mu.Lock()
	closed, sub := r.closed, r.sub
	r.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	if sub == nil { // subscribe (it dials) without holding mu: Close may come meanwhile
		sub = r.client.Subscribe(ctx, r.channel)
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = sub.Close()
			return nil, errClosed
		}
		r.sub = sub
		r.mu.Unlock()
	}
	m, err := sub.ReceiveMessage(ctx)
	if err != nil {
		r.mu.Lock()
		if r.sub == sub {
			_ = sub.Close()
			r.sub = nil
		}
		r.mu.Unlock()
		return nil, err
	}
	return []byte(m.Payload), nil
}

func (r *redisTransport) Close() error {
	r.mu.Lock()
	r.closed = true
	var err error
	if r.sub != nil {
		err = r.sub.Close()
		r.sub = nil
	}
	r.mu.Unlock()
	if cerr := r.client.Close(); err == nil {
		err = cerr
	}
	return err
}
