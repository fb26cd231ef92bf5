package gateway

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// benchBody is a typical small streamed chat request (~400 bytes).
func benchBody(model string) []byte {
	return fmt.Appendf(nil, `{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"temperature":0.7,"top_p":0.95,"messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly and cite sources when you can."},{"role":"user","content":"Explain in two sentences why the time to first token of a large language model grows with the prompt length, and what prefix caching changes about it."}]}`, model)
}

// gatewayBench is the benchmark's world: 10,000 keys, 100 routes (90 exact,
// 10 globs) over ten pools of two upstreams.
type gatewayBench struct {
	g       *Gateway
	headers [][]byte
	bodies  [][]byte
}

func newGatewayBench(b testing.TB) *gatewayBench { return newGatewayBenchOn(b, QuotaBackend{}) }

// newGatewayBenchOn is the benchmark's world with its quotas on backend.
func newGatewayBenchOn(b testing.TB, backend QuotaBackend) *gatewayBench {
	cfg := manyKeysConfig(10000, 100)
	cfg.QuotaBackend = backend
	g, _ := newGateway(b, cfg, Options{Clock: clock.Real}) // its cost is part of the step
	gb := &gatewayBench{g: g}
	for i := range 1024 {
		gb.headers = append(gb.headers, []byte("Bearer "+testKey(i*9%10000)))
	}
	for i := range 100 {
		m := fmt.Sprintf("model-%d", i)
		if i%10 == 9 {
			m = fmt.Sprintf("family-%d-70b", i) // matches a glob, after all 90 exact misses
		}
		gb.bodies = append(gb.bodies, benchBody(m))
	}
	return gb
}

// step is one request's whole gateway work, uncontended.
func (gb *gatewayBench) step(p *fastjson.Parser, i int) error {
	s := gb.g.Snapshot()
	k, rej := s.Authenticate(gb.headers[i%len(gb.headers)])
	if rej != nil {
		return rej
	}
	req, rej := s.CheckRequest(p, Chat, gb.bodies[i%len(gb.bodies)])
	if rej != nil {
		return rej
	}
	res, rej := s.Admit(k, req.Reserve())
	if rej != nil {
		return rej
	}
	if _, rej = req.Route.Deadlines(Deadlines{FirstToken: 120 * time.Second}, nil, nil); rej != nil {
		return rej
	}
	c, rej := s.Choose(&req, nil)
	if rej != nil {
		req.Release()
		return rej
	}
	s.Commit(&req, &c)
	req.Release()
	u := c.Upstream
	release, rej := u.Acquire(nil)
	if rej != nil {
		return rej
	}
	release()
	c.Prefilled() // its first token came (as the proxy says when it parses it)
	gb.g.Done(u, true)
	res.Settle(req.PromptTokens + 100)
	return nil
}

// newTTFTBench is the benchmark's world with its ten pools made one
// least_ttft pool of 100 upstreams, each upstream's model taught, the
// prefix index full (100,000 entries), and bodies of eight shared system
// prompts of 1,000 to 2,000 tokens with a short question each (a
// request's chain of 65 to 125 blocks, matched whole once it has been
// seen).
func newTTFTBench(b testing.TB) *gatewayBench {
	cfg := manyKeysConfig(10000, 100)
	var ups []string
	for i := range 100 {
		ups = append(ups, fmt.Sprintf("http://10.1.%d.%d:8000", i/200, i%200+1))
	}
	cfg.Pools = []PoolConfig{{Name: "ttft", Upstreams: ups, Policy: PolicyLeastTTFT, MaxInFlight: 1 << 20}}
	for i := range cfg.Routes {
		cfg.Routes[i].Pool = "ttft"
	}
	g, _ := newGateway(b, cfg, Options{Clock: clock.Real})
	gb := &gatewayBench{g: g}
	for i := range 1024 {
		gb.headers = append(gb.headers, []byte("Bearer "+testKey(i*9%10000)))
	}
	for i, u := range g.Snapshot().Pools()[0].Upstreams {
		engine{perToken: time.Duration(80+i%40) * time.Microsecond, perAhead: 50 * time.Millisecond}.teach(u, clock.Real.Now())
		// Each engine reports its cache's size, and its homes are full
		// (room: every candidate's homes scanned).
		u.SetEngineLoad(EngineLoad{KVCacheUsage: -1, CacheTokens: 200_000}, 0)
		for j := range uint64(maxHomes) {
			u.homes.note(1<<40+j, 1500, 0)
		}
	}
	var chain [100]uint64
	for i := range 2 * g.index.Capacity() / len(chain) { // twice the capacity: full
		for j := range chain {
			chain[j] = uint64(i)<<32 | uint64(j) + 1
		}
		g.index.Record(chain[:], uint32(i%100+1), 0)
	}
	for i := range 64 {
		body := fmt.Appendf(nil, `{"model":"model-0","stream":true,"max_tokens":256,"messages":[{"role":"system","content":%q},{"role":"user","content":"Question %d: what changes when the prompt grows?"}]}`,
			systemPrompt(i%8, 1000+i%8*140), i)
		gb.bodies = append(gb.bodies, body)
	}
	return gb
}

// BenchmarkGatewayStep: authenticate + validate + quota admit + deadlines +
// route + admission acquire/release + settle, with 10,000 keys and 100
// routes. Reports p50/p99/max per step (each timed on its own) besides the
// mean, and allocs/op.
func BenchmarkGatewayStep(b *testing.B) { timeSteps(b, newGatewayBench(b)) }

// BenchmarkGatewayStepLeastTTFT: the same step in newTTFTBench's world: a
// least_ttft pool of 100 upstreams, 100,000 prefixes indexed, requests
// with long shared system prompts (the chain, its lookup and record, 100
// predictions).
func BenchmarkGatewayStepLeastTTFT(b *testing.B) { timeSteps(b, newTTFTBench(b)) }

// timeSteps runs gb's step b.N times after a warm-up, timing each.
func timeSteps(b *testing.B, gb *gatewayBench) {
	var p fastjson.Parser
	for i := range 2000 { // warm the parser's buffers, the pools (and Redis' connections)
		if err := gb.step(&p, i); err != nil {
			b.Fatal(err)
		}
	}
	durs := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := gb.step(&p, i); err != nil {
			b.Fatal(err)
		}
		if len(durs) < cap(durs) {
			durs = append(durs, time.Since(t0))
		}
	}
	b.StopTimer()
	reportPercentiles(b, durs)
}

// BenchmarkChooseLeastTTFT is least_ttft's choice alone, in newTTFTBench's
// world, for requests already checked: the chain's lookup, 100 upstreams
// predicted, the choice recorded.
func BenchmarkChooseLeastTTFT(b *testing.B) {
	gb := newTTFTBench(b)
	s := gb.g.Snapshot()
	var p fastjson.Parser
	reqs := make([]Request, len(gb.bodies))
	for i, body := range gb.bodies {
		var rej *Rejection
		if reqs[i], rej = s.CheckRequest(&p, Chat, body); rej != nil {
			b.Fatal(rej)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		req := &reqs[i%len(reqs)]
		c, rej := s.Choose(req, nil)
		if rej != nil {
			b.Fatal(rej)
		}
		s.Commit(req, &c)
		c.Prefilled()
	}
}

// BenchmarkGatewayStepParallel: the same step from every core at once (each
// goroutine with its own parser, as each exchange has).
func BenchmarkGatewayStepParallel(b *testing.B) {
	gb := newGatewayBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var p fastjson.Parser
		i := 0
		for pb.Next() {
			if err := gb.step(&p, i); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func reportPercentiles(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	q := func(f float64) float64 { return float64(durs[int(f*float64(len(durs)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.ReportMetric(q(0.999), "p99.9-ns")
	b.ReportMetric(float64(durs[len(durs)-1].Nanoseconds()), "max-ns")
}

// BenchmarkAuthenticate10k is the key check alone: one SHA-256, one map
// probe.
func BenchmarkAuthenticate10k(b *testing.B) {
	gb := newGatewayBench(b)
	s := gb.g.Snapshot()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, rej := s.Authenticate(gb.headers[i%len(gb.headers)]); rej != nil {
			b.Fatal(rej)
		}
	}
}

// BenchmarkCheckRequest is the body validation alone.
func BenchmarkCheckRequest(b *testing.B) {
	gb := newGatewayBench(b)
	s := gb.g.Snapshot()
	var p fastjson.Parser
	body := gb.bodies[0]
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, rej := s.CheckRequest(&p, Chat, body); rej != nil {
			b.Fatal(rej)
		}
	}
}

// BenchmarkAdmissionUncontended is Acquire + release with a free slot.
func BenchmarkAdmissionUncontended(b *testing.B) {
	u, _ := queueUpstream(b, Options{Clock: clock.Real}, 64, 64, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		rel, rej := u.Acquire(nil)
		if rej != nil {
			b.Fatal(rej)
		}
		rel()
	}
}

// BenchmarkAdmissionContended: 1,000 goroutines cycle through a 1-slot
// upstream (every Acquire but the first waits in the FIFO queue): the
// throughput of FIFO handoffs. ns/op is per admitted request.
func BenchmarkAdmissionContended(b *testing.B) {
	const waiters = 1000
	u, _ := queueUpstream(b, Options{Clock: clock.Real}, 1, waiters, time.Minute)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/waiters + 1
	for range waiters {
		wg.Go(func() {
			for range per {
				rel, rej := u.Acquire(nil)
				if rej != nil {
					b.Error(rej)
					return
				}
				rel()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(per*waiters), "ns/handoff")
}
