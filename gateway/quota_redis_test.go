//go:build integration

package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttftlens/ttftlens/internal/redistest"
)

// redisQuotaGateway is quotaGateway started (its settler runs).
func redisQuotaGateway(t *testing.T, backend QuotaBackend, q Quota) (*Gateway, *Key) {
	t.Helper()
	g, k, _ := quotaGateway(t, backend, q)
	g.Start()
	return g, k
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
	g, k := redisQuotaGateway(t, backend, q)
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
	g, k := redisQuotaGateway(t, redisBackend(r, QuotaFailOpen), Quota{Interval: time.Hour, Requests: 3})
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
