//go:build integration

package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/redistest"
)

// redisQuotaGateway is quotaGateway on the redis backend, started (its
// settler runs).
func redisQuotaGateway(t *testing.T, backend QuotaBackend, q Quota) (*Gateway, *Key, *fakeClock) {
	t.Helper()
	cfg := &Config{
		QuotaBackend: backend,
		Keys:         []KeyConfig{{Name: "k", Key: HashKey("sk"), Quota: &q}},
		Routes:       []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:        onePool("http://127.0.0.1:1"),
	}
	g, clk := newGateway(t, cfg, Options{})
	g.Start()
	k, rej := g.Authenticate([]byte("Bearer sk"))
	if rej != nil {
		t.Fatal(rej)
	}
	return g, k, clk
}

// waitLevel waits until field f ("r" or "t") of the key's hash on r is
// want (settlements land asynchronously).
func waitLevel(t *testing.T, r *redistest.Server, key, f string, want float64) {
	t.Helper()
	var got string
	for range 500 {
		got, _ = r.Get("HGET", key, f)
		if v, err := strconv.ParseFloat(got, 64); err == nil && v > want-0.5 && v < want+0.5 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s.%s = %q, want %v", key, f, got, want)
}

// TestRedisQuotaShared: two replicas on one Redis spend one key's quota
// together, requests and tokens, with the local backend's arithmetic
// (Retry-After, settlement, cancel).
func TestRedisQuotaShared(t *testing.T) {
	r := redistest.Start(t)
	backend := redisBackend(r, "")
	key := backend.Redis.KeyPrefix + "k"

	t.Run("requests", func(t *testing.T) {
		q := Quota{Interval: time.Hour, Requests: 3}
		backend := backend
		backend.Redis.KeyPrefix += "req:"
		a, ka, _ := redisQuotaGateway(t, backend, q)
		b, kb, _ := redisQuotaGateway(t, backend, q)
		for i, g := range []*Gateway{a, b, a} {
			k := map[*Gateway]*Key{a: ka, b: kb}[g]
			if _, rej := g.Snapshot().Admit(k, 0); rej != nil {
				t.Fatalf("admission %d: %+v", i, rej)
			}
		}
		res, rej := b.Snapshot().Admit(kb, 0)
		// One request refills every 20 minutes: nearly all of it is to wait.
		if rej == nil || rej.Status != 429 || rej.Type != "requests" || rej.Detail != endreason.DetailQuotaExceeded ||
			rej.RetryAfter <= 1100 || rej.RetryAfter > 1200 || res.Fallback() {
			t.Fatalf("4th admission across replicas: %+v (fallback %v)", rej, res.Fallback())
		}
	})

	t.Run("tokens", func(t *testing.T) {
		q := Quota{Interval: time.Hour, Tokens: 1000}
		a, ka, _ := redisQuotaGateway(t, backend, q)
		b, kb, _ := redisQuotaGateway(t, backend, q)
		resA, rej := a.Snapshot().Admit(ka, 600)
		if rej != nil {
			t.Fatal(rej)
		}
		// 400 left; 600 needs 200 more, 720s of refill at 1000/h.
		if _, rej := b.Snapshot().Admit(kb, 600); rej == nil || rej.Type != "tokens" || rej.RetryAfter <= 700 || rej.RetryAfter > 720 {
			t.Fatalf("over the shared tokens: %+v", rej)
		}
		resA.Settle(100) // 500 back, on Redis once the settler sends it
		waitLevel(t, r, key, "t", 900)
		resB, rej := b.Snapshot().Admit(kb, 600)
		if rej != nil {
			t.Fatalf("after the refund: %+v", rej)
		}
		resB.Cancel()
		waitLevel(t, r, key, "t", 900)
	})
}

// TestRedisQuotaFailure: with Redis stopped, on_failure decides (open:
// this replica's buckets, which counted what it admitted through Redis,
// flagged and counted; closed: 503 quota_unavailable), admissions skip
// Redis for redisRetryAfter after a failure, and a Redis that is back is
// used again without a restart.
func TestRedisQuotaFailure(t *testing.T) {
	tests := []struct {
		mode string
		// what each admission does while Redis is down: 0 admitted, else
		// the rejection's status
		down []int
	}{
		{QuotaFailOpen, []int{0, 0, 429}}, // 3 a replica, one spent through Redis
		{QuotaFailClosed, []int{503, 503, 503}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			r := redistest.Start(t)
			backend := redisBackend(r, tc.mode)
			g, k, clk := redisQuotaGateway(t, backend, Quota{Interval: time.Hour, Requests: 3})
			counters := func() (fallbacks, unavailable uint64) {
				st := g.quotaRedis()
				return st.fallbacks.Load(), st.unavailable.Load()
			}
			if res, rej := g.Snapshot().Admit(k, 0); rej != nil || res.Fallback() {
				t.Fatalf("with Redis up: %+v (fallback %v)", rej, res.Fallback())
			}
			r.Stop()
			for i, want := range tc.down {
				res, rej := g.Snapshot().Admit(k, 0)
				switch {
				case want == 0 && rej != nil, want != 0 && (rej == nil || rej.Status != want):
					t.Fatalf("down, admission %d: %+v, want status %d", i, rej, want)
				case tc.mode == QuotaFailOpen && !res.Fallback():
					t.Fatalf("down, admission %d: not flagged as a fallback", i)
				case want == 503 && (rej.Reason != endreason.WorkerFailure || rej.Detail != endreason.DetailQuotaUnavailable ||
					rej.Code != "quota_unavailable" || rej.RetryAfter != 1):
					t.Fatalf("fail closed: %+v", rej)
				}
			}
			fallbacks, unavailable := counters()
			if tc.mode == QuotaFailOpen && (fallbacks != 3 || unavailable != 0) ||
				tc.mode == QuotaFailClosed && (fallbacks != 0 || unavailable != 3) {
				t.Fatalf("counters: fallbacks %d, unavailable %d", fallbacks, unavailable)
			}
			r.Start() // empty: a restarted Redis without persistence has full buckets
			if res, _ := g.Snapshot().Admit(k, 0); tc.mode == QuotaFailOpen && !res.Fallback() {
				t.Fatal("Redis tried again before redisRetryAfter")
			}
			clk.Advance(redisRetryAfter)
			for i := range 3 {
				if res, rej := g.Snapshot().Admit(k, 0); rej != nil || res.Fallback() {
					t.Fatalf("Redis back, admission %d: %+v (fallback %v)", i, rej, res.Fallback())
				}
			}
			if _, rej := g.Snapshot().Admit(k, 0); rej == nil || rej.Status != 429 {
				t.Fatalf("Redis back, over the quota: %+v", rej)
			}
		})
	}
}

// TestRedisQuotaTimeout: a Redis that does not answer within the timeout
// counts as down: the admission falls back instead of waiting for it.
func TestRedisQuotaTimeout(t *testing.T) {
	r := redistest.Start(t)
	backend := redisBackend(r, QuotaFailOpen)
	// Long enough that a Redis that is up answers in time however loaded
	// the machine (the first admission dials and loads the script). The
	// pause below outlasts it by as much, and ends before the give-back's
	// settlement, sent at the timeout, gives up (settleTimeout).
	backend.Redis.Timeout = 500 * time.Millisecond
	g, k, _ := redisQuotaGateway(t, backend, Quota{Interval: time.Hour, Requests: 3})
	if res, rej := g.Snapshot().Admit(k, 0); rej != nil || res.Fallback() {
		t.Fatalf("with Redis up: %+v (fallback %v)", rej, res.Fallback())
	}
	// CLIENT PAUSE holds every other client's commands on the server.
	if reply, err := r.Do("CLIENT", "PAUSE", "1000", "ALL"); err != nil || reply != "+OK" {
		t.Fatal(reply, err)
	}
	res, rej := g.Snapshot().Admit(k, 0)
	if rej != nil || !res.Fallback() {
		t.Fatalf("with Redis paused: %+v (fallback %v)", rej, res.Fallback())
	}
	// The admission cannot know whether its script ran (a busy Redis runs
	// it late; a paused one drops it with the closed connection), so it
	// gives back what the script may have charged: here the script never
	// ran, so the key gets that request back, up to its capacity.
	waitLevel(t, r, backend.Redis.KeyPrefix+"k", "r", 3)
}

// TestRedisQuotaReplyError: a key Redis refuses (a wrong type at its name)
// fails alone; the other keys keep using Redis.
func TestRedisQuotaReplyError(t *testing.T) {
	r := redistest.Start(t)
	backend := redisBackend(r, QuotaFailClosed)
	q := Quota{Interval: time.Hour, Requests: 3}
	cfg := &Config{
		QuotaBackend: backend,
		Keys: []KeyConfig{
			{Name: "bad", Key: HashKey("sk-bad"), Quota: &q},
			{Name: "good", Key: HashKey("sk-good"), Quota: &q},
		},
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:  onePool("http://127.0.0.1:1"),
	}
	g, _ := newGateway(t, cfg, Options{})
	g.Start()
	if _, err := r.Do("SET", backend.Redis.KeyPrefix+"bad", "a string, not a hash"); err != nil {
		t.Fatal(err)
	}
	key := func(secret string) *Key {
		k, rej := g.Authenticate([]byte("Bearer " + secret))
		if rej != nil {
			t.Fatal(rej)
		}
		return k
	}
	bad, good := key("sk-bad"), key("sk-good")
	if _, rej := g.Snapshot().Admit(bad, 0); rej == nil || rej.Detail != endreason.DetailQuotaUnavailable {
		t.Fatalf("key with a wrong type on Redis: %+v, want quota_unavailable", rej)
	}
	for i := range 3 {
		if res, rej := g.Snapshot().Admit(good, 0); rej != nil || res.Fallback() {
			t.Fatalf("other key, admission %d after the refusal: %+v (fallback %v)", i, rej, res.Fallback())
		}
	}
	waitLevel(t, r, backend.Redis.KeyPrefix+"good", "r", 0)
}

// TestRedisQuotaReload: a reload keeps the shared levels (they live on
// Redis) and may change the failure mode, the prefix and the timeout, not
// the connection; switching to the local backend and back works.
func TestRedisQuotaReload(t *testing.T) {
	r := redistest.Start(t)
	backend := redisBackend(r, QuotaFailOpen)
	q := Quota{Interval: time.Hour, Requests: 2}
	cfg := func(b QuotaBackend) *Config {
		return &Config{
			QuotaBackend: b,
			Keys:         []KeyConfig{{Name: "k", Key: HashKey("sk"), Quota: &q}},
			Routes:       []RouteConfig{{Model: "m", Pool: "p"}},
			Pools:        onePool("http://127.0.0.1:1"),
		}
	}
	g, k, _ := redisQuotaGateway(t, backend, q)
	if _, rej := g.Snapshot().Admit(k, 0); rej != nil {
		t.Fatal(rej)
	}
	closed := backend
	closed.Redis.OnFailure = QuotaFailClosed
	if err := g.Reload(cfg(closed)); err != nil {
		t.Fatal(err)
	}
	k, _ = g.Authenticate([]byte("Bearer sk"))
	if _, rej := g.Snapshot().Admit(k, 0); rej != nil {
		t.Fatal("the second of two requests after the reload:", rej)
	}
	if _, rej := g.Snapshot().Admit(k, 0); rej == nil || rej.Status != 429 {
		t.Fatalf("the reload forgot the shared level: %+v", rej)
	}
	moved := backend
	moved.Redis.Address = "127.0.0.1:1"
	err := g.Reload(cfg(moved))
	if err == nil || !strings.Contains(err.Error(), "cannot change on reload") {
		t.Fatalf("connection change on reload: %v", err)
	}
	if err := g.Reload(cfg(QuotaBackend{})); err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(cfg(backend)); err != nil {
		t.Fatal(err)
	}
	k, _ = g.Authenticate([]byte("Bearer sk"))
	if _, rej := g.Snapshot().Admit(k, 0); rej == nil || rej.Status != 429 {
		t.Fatalf("back on redis: %+v", rej)
	}
}

// TestRedisQuotaCollector: the fallback and lost-settlement counters are
// exported with the redis backend, not without it.
func TestRedisQuotaCollector(t *testing.T) {
	r := redistest.Start(t)
	g, k, _ := redisQuotaGateway(t, redisBackend(r, QuotaFailOpen), Quota{Interval: time.Hour, Requests: 3})
	r.Stop()
	if _, rej := g.Snapshot().Admit(k, 0); rej != nil {
		t.Fatal(rej)
	}
	want := `
# HELP ttftlens_quota_fallbacks_total Admissions this replica's own quota buckets decided because Redis failed or timed out (on_failure: open).
# TYPE ttftlens_quota_fallbacks_total counter
ttftlens_quota_fallbacks_total 1
`
	label := func(u *Upstream) string { return u.Name }
	if err := testutil.CollectAndCompare(NewCollector(g, label), strings.NewReader(want), "ttftlens_quota_fallbacks_total"); err != nil {
		t.Error(err)
	}
	local, _ := newGateway(t, reloadConfig([]string{"http://a:1"}, 0, "m"), Options{})
	if n := testutil.CollectAndCount(NewCollector(local, label), "ttftlens_quota_fallbacks_total"); n != 0 {
		t.Errorf("local backend exports %d fallback series", n)
	}
}
