//go:build integration

package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/redistest"
)

// quotaRecord is what the replica test reads of a record.
type quotaRecord struct {
	status   int
	detail   string
	checked  bool
	fallback bool
}

// replica is one proxy with its own gateway.
type replica struct {
	addr string
	p    *Proxy
	sink *captureSink
}

const replicaQuota = 10 // requests per replicaInterval
const replicaInterval = time.Hour

func replicaConfig(backend, redisAddr, prefix, onFailure, upstream string) string {
	timeout := "0s"
	if backend == "redis" {
		timeout = redistest.Timeout.String() // no fallback while Redis is up, however loaded the machine
	}
	return fmt.Sprintf(`
quota_backend:
  kind: %s
  redis: {address: %q, key_prefix: %q, on_failure: %q, timeout: %s}
auth: keys
keys:
  - name: shared
    key: %s
    quota: {interval: %s, requests: %d}
routes: [{model: m, pool: p}]
pools: [{name: p, upstreams: [%s]}]
`, backend, redisAddr, prefix, onFailure, timeout, gateway.HashKey("sk-shared"), replicaInterval, replicaQuota, upstream)
}

// startReplica runs a real proxy with its own gateway from yaml.
func startReplica(t *testing.T, yaml string) *replica {
	t.Helper()
	addr, sink, p := startGateway(t, yaml, nil)
	return &replica{addr: addr, p: p, sink: sink}
}

// cheapUpstream answers every chat request at once, not streamed.
func cheapUpstream(t *testing.T) string {
	return startUpstream(t, func(c *upConn) {
		c.whole(200, "application/json", `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}).url
}

// postShared sends one chat request with the shared key to rep.
func postShared(t *testing.T, rep *replica, body string) (*http.Response, string) {
	t.Helper()
	resp, got, err := post(t, rep.addr, body, "Authorization", "Bearer sk-shared")
	if err != nil {
		t.Fatal(err)
	}
	return resp, got
}

// send sends n requests round robin over the replicas and returns how many
// were admitted (200) and their records.
func send(t *testing.T, reps []*replica, n int) (admitted int, recs []quotaRecord) {
	t.Helper()
	for i := range n {
		if resp, _ := postShared(t, reps[i%len(reps)], `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode == 200 {
			admitted++
		}
	}
	for k, rep := range reps {
		for range (n - k + len(reps) - 1) / len(reps) { // the requests rep was sent
			r := rep.sink.next(t)
			recs = append(recs, quotaRecord{r.Status, string(r.Detail), r.QuotaChecked, r.QuotaFallback})
		}
	}
	return admitted, recs
}

// refillBound is the most a token bucket of replicaQuota per
// replicaInterval admits over elapsed: its burst plus what refilled.
func refillBound(elapsed time.Duration) int {
	return replicaQuota + int(float64(replicaQuota)*float64(elapsed)/float64(replicaInterval))
}

// TestReplicasShareQuota: three real proxies, each with its own gateway,
// in front of one upstream, one key. With local buckets they admit three
// times the key's quota; on one Redis, the quota: the bucket's burst plus
// what refilled while the test ran (refillBound: 10 requests an hour
// refill one every 6 minutes, so the bound is exact for a shorter run).
// With Redis stopped (fail open) each replica's own buckets decide,
// flagged and counted, knowing what the replica admitted through Redis;
// with Redis back the replicas share it again, no restart, and charge it
// with what they admitted on their own.
func TestReplicasShareQuota(t *testing.T) {
	up := cheapUpstream(t)
	r := redistest.Start(t)
	start := time.Now()

	var local []*replica
	for range 3 {
		local = append(local, startReplica(t, replicaConfig("local", "", "", "", up)))
	}
	admitted, _ := send(t, local, 6*replicaQuota)
	if admitted < 3*replicaQuota || admitted > 3*refillBound(time.Since(start)) {
		t.Fatalf("local buckets: %d admitted, want three replicas' quota, %d", admitted, 3*replicaQuota)
	}

	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	var shared []*replica
	for range 3 {
		shared = append(shared, startReplica(t, replicaConfig("redis", r.Addr, prefix, "open", up)))
	}
	start = time.Now()
	admitted, recs := send(t, shared, 6*replicaQuota)
	if admitted < replicaQuota || admitted > refillBound(time.Since(start)) {
		t.Fatalf("redis: %d admitted across 3 replicas, want the key's quota, %d", admitted, replicaQuota)
	}
	for _, rec := range recs {
		if !rec.checked || rec.fallback || rec.status != 200 && rec.detail != "quota_exceeded" {
			t.Fatalf("redis up: record %+v", rec)
		}
	}

	// Down: each replica has its own quota less what it admitted through
	// Redis (round robin: 10 over 3 replicas), 30 - 10 in all.
	r.Stop()
	admitted, recs = send(t, shared, 3*replicaQuota)
	if admitted != 2*replicaQuota {
		t.Fatalf("redis down: %d admitted, want %d", admitted, 2*replicaQuota)
	}
	for _, rec := range recs {
		if !rec.fallback {
			t.Fatalf("redis down: record not flagged: %+v", rec)
		}
	}
	for i, rep := range shared {
		want := fmt.Sprintf("\n# HELP ttftlens_quota_fallbacks_total Admissions this replica's own quota buckets decided because Redis failed or timed out (on_failure: open).\n# TYPE ttftlens_quota_fallbacks_total counter\nttftlens_quota_fallbacks_total %d\n", replicaQuota)
		c := gateway.NewCollector(rep.p.gw, func(u *gateway.Upstream) string { return u.Name })
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ttftlens_quota_fallbacks_total"); err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}

	// Back (empty: full buckets): each replica uses Redis again once its
	// pause after the failure is over, and charges it with the 20 it
	// admitted meanwhile, so the key's quota is spent: at most each
	// replica's first admission on Redis (it carries no debt) gets through.
	r.Start()
	start = time.Now()
	shared0 := 0
	for i, rep := range shared {
		for try := 0; ; try++ {
			if try == 100 {
				t.Fatalf("replica %d never used Redis again", i)
			}
			n, recs := send(t, []*replica{rep}, 1)
			if !recs[0].fallback {
				shared0 += n
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	admitted, recs = send(t, shared, 6*replicaQuota)
	if total := shared0 + admitted; total > len(shared)+refillBound(time.Since(start))-replicaQuota {
		t.Fatalf("redis back: %d admitted across 3 replicas, want at most one each: the quota is spent", total)
	}
	for _, rec := range recs {
		if rec.fallback {
			t.Fatalf("redis back: record still flagged: %+v", rec)
		}
	}
}

// TestReplicaQuotaFailClosed: with on_failure closed and Redis down, a
// request is refused with 503, the OpenAI error shape and the end detail
// quota_unavailable; with Redis back it is admitted again.
func TestReplicaQuotaFailClosed(t *testing.T) {
	r := redistest.Start(t)
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	rep := startReplica(t, replicaConfig("redis", r.Addr, prefix, "closed", cheapUpstream(t)))
	if n, _ := send(t, []*replica{rep}, 1); n != 1 {
		t.Fatal("not admitted with Redis up")
	}
	r.Stop()
	resp, body := postShared(t, rep, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" ||
		string(body) != `{"error":{"message":"The quota service is unavailable; retry shortly.","type":"server_error","param":null,"code":"quota_unavailable"}}` {
		t.Fatalf("redis down: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if rec := rep.sink.next(t); rec.Detail != "quota_unavailable" || rec.QuotaFallback || !rec.QuotaChecked {
		t.Fatalf("redis down: record %s fallback %v checked %v", rec.Detail, rec.QuotaFallback, rec.QuotaChecked)
	}
	r.Start()
	for try := 0; ; try++ {
		if try == 100 {
			t.Fatal("never admitted after Redis came back")
		}
		if n, _ := send(t, []*replica{rep}, 1); n == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
