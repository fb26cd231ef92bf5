package gateway

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// quotaGateway is a gateway with one key "k" (secret "sk") with quota q on
// backend.
func quotaGateway(t *testing.T, backend QuotaBackend, q Quota) (*Gateway, *Key, *clock.Fake) {
	t.Helper()
	cfg := &Config{
		QuotaBackend: backend,
		Keys:         []KeyConfig{{Name: "k", Key: HashKey("sk"), Quota: &q}},
		Routes:       []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:        onePool("http://127.0.0.1:1"),
	}
	g, clk := newGateway(t, cfg, Options{})
	k, rej := g.Authenticate([]byte("Bearer sk"))
	if rej != nil {
		t.Fatal(rej)
	}
	return g, k, clk
}

// TestQuotaRejection: a refused admission is answered with the key's
// Retry-After rounded up to whole seconds (429), or 503 when the shared
// backend is unavailable and fails closed. The buckets' arithmetic is
// package quota's.
func TestQuotaRejection(t *testing.T) {
	unreachable := QuotaBackend{Kind: QuotaRedis, Redis: RedisConfig{Address: "127.0.0.1:1", OnFailure: QuotaFailClosed}}
	tests := []struct {
		name    string
		backend QuotaBackend
		q       Quota
		admit   []int // the estimates admitted first
		est     int
		want    Rejection
	}{
		{"requests", QuotaBackend{}, Quota{Interval: time.Minute, Requests: 3}, []int{0, 0, 0}, 0, Rejection{
			Status: 429, RetryAfter: 20, Type: "requests", Code: "rate_limit_exceeded",
			Message: "Rate limit reached for requests on this API key; retry in 20s.",
			Reason:  endreason.PolicyBlock, Detail: endreason.DetailQuotaExceeded,
		}},
		{"tokens, 60ms to wait", QuotaBackend{}, Quota{Interval: time.Minute, Tokens: 1000}, []int{1000}, 1, Rejection{
			Status: 429, RetryAfter: 1, Type: "tokens", Code: "rate_limit_exceeded",
			Message: "Rate limit reached for tokens on this API key; retry in 1s.",
			Reason:  endreason.PolicyBlock, Detail: endreason.DetailQuotaExceeded,
		}},
		{"redis unavailable, fail closed", unreachable, Quota{Interval: time.Minute, Requests: 3}, nil, 0, *rejQuotaUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, k, _ := quotaGateway(t, tt.backend, tt.q)
			s := g.Snapshot()
			for _, est := range tt.admit {
				if _, rej := s.Admit(k, est); rej != nil {
					t.Fatal(rej)
				}
			}
			_, rej := s.Admit(k, tt.est)
			if rej == nil || *rej != tt.want {
				t.Fatalf("got %+v, want %+v", rej, tt.want)
			}
		})
	}
}

func TestQuotaUnlimited(t *testing.T) {
	g, k, _ := quotaGateway(t, QuotaBackend{}, Quota{})
	if k.HasQuota() {
		t.Fatal("a key without quota has one")
	}
	for range 1000 {
		res, rej := g.Snapshot().Admit(k, 1<<20)
		if rej != nil {
			t.Fatal(rej)
		}
		res.Settle(1 << 20)
	}
	if res, rej := g.Snapshot().Admit(nil, 5); rej != nil || res != (Reservation{}) {
		t.Fatal("nil key not admitted freely")
	}
}

// TestQuotaSurvivesReload: a reload keeps a key's spent quota, and applies
// a new limit to it.
func TestQuotaSurvivesReload(t *testing.T) {
	g, k, _ := quotaGateway(t, QuotaBackend{}, Quota{Interval: time.Minute, Requests: 2})
	for range 2 {
		if _, rej := g.Snapshot().Admit(k, 0); rej != nil {
			t.Fatal(rej)
		}
	}
	cfg := *g.Snapshot().Config()
	cfg.Keys = []KeyConfig{{Name: "k", Key: HashKey("sk"), Quota: &Quota{Interval: time.Minute, Requests: 3}}}
	if err := g.Reload(&cfg); err != nil {
		t.Fatal(err)
	}
	k2, _ := g.Authenticate([]byte("Bearer sk"))
	if _, rej := g.Snapshot().Admit(k2, 0); rej == nil {
		t.Fatal("reload refilled the bucket")
	}
}
