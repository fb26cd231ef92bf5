package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
)

// quotaRecord is what the replica test reads of a record.
type quotaRecord struct {
	status   int
	detail   string
	checked  bool
	fallback bool
}

// quotaSink keeps the quota part of every record.
type quotaSink struct {
	mu   sync.Mutex
	recs []quotaRecord
}

func (s *quotaSink) Emit(r *record.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, quotaRecord{r.Status, string(r.Detail), r.QuotaChecked, r.QuotaFallback})
}

// take returns the records since the last take.
func (s *quotaSink) take() []quotaRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.recs
	s.recs = nil
	return out
}

// replica is one proxy with its own gateway.
type replica struct {
	addr string
	gw   *gateway.Gateway
	sink *quotaSink
}

const replicaQuota = 10 // requests per replicaInterval
const replicaInterval = time.Hour

func replicaConfig(backend, redisAddr, prefix, onFailure, upstream string) string {
	timeout := "0s"
	if backend == "redis" {
		timeout = gateway.RedisTestTimeout.String() // no fallback while Redis is up, however loaded the machine
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
	cfg, err := gateway.Parse([]byte(yaml), "replica.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	sink := &quotaSink{}
	p, err := proxy.New(proxy.Config{Gateway: gw}, sink, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
		gw.Stop()
	})
	return &replica{addr: ln.Addr().String(), gw: gw, sink: sink}
}

// cheapUpstream answers every chat request at once, not streamed.
func cheapUpstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// send sends n requests round robin over the replicas and returns how many
// were admitted (200) and their records.
func send(t *testing.T, reps []*replica, n int) (admitted int, recs []quotaRecord) {
	t.Helper()
	for i := range n {
		req, _ := http.NewRequest("POST", "http://"+reps[i%len(reps)].addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-shared")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			admitted++
		}
	}
	for _, r := range reps {
		recs = append(recs, r.sink.take()...)
	}
	if len(recs) != n {
		t.Fatalf("%d records for %d requests", len(recs), n)
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
// with Redis back the replicas share it again, no restart.
func TestReplicasShareQuota(t *testing.T) {
	up := cheapUpstream(t)
	r := gateway.StartRedis(t)
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
		c := gateway.NewCollector(rep.gw, func(u *gateway.Upstream) string { return u.Name })
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ttftlens_quota_fallbacks_total"); err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}

	// Back (empty: full buckets): each replica uses Redis again once its
	// pause after the failure is over; from then on they share it.
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
	if total := shared0 + admitted; total < replicaQuota || total > refillBound(time.Since(start)) {
		t.Fatalf("redis back: %d admitted across 3 replicas, want the key's quota, %d", total, replicaQuota)
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
	r := gateway.StartRedis(t)
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	rep := startReplica(t, replicaConfig("redis", r.Addr, prefix, "closed", cheapUpstream(t)))
	if n, _ := send(t, []*replica{rep}, 1); n != 1 {
		t.Fatal("not admitted with Redis up")
	}
	r.Stop()
	req, _ := http.NewRequest("POST", "http://"+rep.addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-shared")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" ||
		string(body) != `{"error":{"message":"The quota service is unavailable; retry shortly.","type":"server_error","param":null,"code":"quota_unavailable"}}` {
		t.Fatalf("redis down: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if recs := rep.sink.take(); len(recs) != 1 || recs[0].detail != "quota_unavailable" || recs[0].fallback || !recs[0].checked {
		t.Fatalf("redis down: records %+v", recs)
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
