package share

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRedisPublishNotRetried: whatever retries the options ask for, the
// transport's client retries nothing (go-redis reads MaxRetries -1 as
// none, and keeps it as 0; 0 given would mean its default, 3): a pipeline
// sent again after a timeout would publish what had gone twice.
func TestRedisPublishNotRetried(t *testing.T) {
	opts := &redis.Options{Addr: "127.0.0.1:1", MaxRetries: 3}
	tr := NewRedis(opts, "ch").(*redisTransport)
	defer tr.Close()
	if got := tr.client.Options().MaxRetries; got != 0 {
		t.Fatalf("the transport's client retries %d times, want none", got)
	}
	if opts.MaxRetries != 3 {
		t.Fatalf("the caller's options changed: MaxRetries %d", opts.MaxRetries)
	}
}
