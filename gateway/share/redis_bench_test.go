//go:build integration

package share

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/redistest"
)

// counted counts the messages a Sharer applies.
type counted struct{ n atomic.Uint64 }

func (c *counted) ApplyCommit(*Commit)     { c.n.Add(1) }
func (c *counted) ApplyObserved(*Observed) { c.n.Add(1) }
func (c *counted) Tick()                   {}

// BenchmarkSharePublishRedis is how many messages a second one replica's
// publisher gets through a real redis-server on loopback to another
// replica, its queue kept from running dry (and from dropping: the loop
// waits while it is full): the replica's ceiling, in routed requests a
// second about a third of it (a commit, an end and an observation each).
// The figure is msgs/s, taken once the other replica has applied all b.N.
func BenchmarkSharePublishRedis(b *testing.B) {
	r := redistest.Start(b)
	opts := &redis.Options{Addr: r.Addr}
	const channel = "ttftlens:bench:share"
	recv := &counted{}
	sub := New(NewRedis(opts, channel), 2, recv, zerolog.Nop(), nil)
	sub.Start()
	defer sub.Stop()
	pub := New(NewRedis(opts, channel), 1, &counted{}, zerolog.Nop(), nil)
	pub.Start()
	defer pub.Stop()
	r.WaitSubscribed(channel, 2)

	c := Commit{Upstream: "http://engine-1.models.svc:8000", Computed: 1500, Work: 900 * time.Millisecond,
		Chain: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}, InFlight: 3}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for len(pub.queue) == cap(pub.queue) {
			runtime.Gosched()
		}
		pub.Publish(&c)
	}
	for recv.n.Load() < uint64(b.N) {
		if st, sst := pub.Stats(), sub.Stats(); st.Dropped+st.Failed+sst.Failed > 0 {
			b.Fatalf("messages lost: publisher %+v, subscriber %+v", st, sst)
		}
		runtime.Gosched()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
