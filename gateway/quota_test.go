package gateway

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

func quotaGateway(t *testing.T, q Quota) (*Gateway, *Key, *fakeClock) {
	t.Helper()
	cfg := &Config{
		Keys:   []KeyConfig{{Name: "k", Key: HashKey("sk"), Quota: &q}},
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:  onePool("http://127.0.0.1:1"),
	}
	g, clk := newGateway(t, cfg, Options{})
	k, rej := g.Authenticate([]byte("Bearer sk"))
	if rej != nil {
		t.Fatal(rej)
	}
	return g, k, clk
}

func TestQuotaRequests(t *testing.T) {
	g, k, clk := quotaGateway(t, Quota{Interval: time.Minute, Requests: 3})
	s := g.Snapshot()
	for i := range 3 {
		if _, rej := s.Admit(k, 0); rej != nil {
			t.Fatalf("request %d rejected: %+v", i, rej)
		}
	}
	_, rej := s.Admit(k, 0)
	if rej == nil {
		t.Fatal("4th request admitted")
	}
	// One request refills every 20s: all 20s are still to wait.
	if rej.Status != 429 || rej.RetryAfter != 20 || rej.Type != "requests" || rej.Code != "rate_limit_exceeded" ||
		rej.Reason.String() != "policy_block" || rej.Detail != endreason.DetailQuotaExceeded {
		t.Fatalf("rejection: %+v", rej)
	}
	clk.Advance(15 * time.Second)
	if _, rej = s.Admit(k, 0); rej == nil || rej.RetryAfter != 5 {
		t.Fatalf("after 15s: %+v", rej)
	}
	clk.Advance(5 * time.Second)
	if _, rej = s.Admit(k, 0); rej != nil {
		t.Fatalf("after 20s: %+v", rej)
	}
	// A long idle period refills to the burst size, not beyond.
	clk.Advance(time.Hour)
	for i := range 3 {
		if _, rej := s.Admit(k, 0); rej != nil {
			t.Fatalf("burst %d: %+v", i, rej)
		}
	}
	if _, rej := s.Admit(k, 0); rej == nil {
		t.Fatal("bucket overfilled")
	}
}

func TestQuotaTokensSettle(t *testing.T) {
	g, k, clk := quotaGateway(t, Quota{Interval: time.Minute, Tokens: 1000})
	s := g.Snapshot()
	tests := []struct {
		name    string
		advance time.Duration
		est     int
		settle  int // -1: cancel; -2: leave open
		admit   bool
		retry   int
	}{
		{"reserve 600", 0, 600, 100, true, 0},                                                     // 600 held, settled at 100 → 900 left
		{"reserve 900", 0, 900, -2, true, 0},                                                      // 0 left
		{"nothing left", 0, 1, 0, false, 1},                                                       // 1 token refills in 60ms → Retry-After 1
		{"30s later", 30 * time.Second, 500, -1, true, 0},                                         // 500 refilled; cancelled → back to 500
		{"over what is left", 0, 800, 0, false, 18},                                               // 300 short at 1000/min = 18s
		{"estimate over capacity waits for a full bucket", 30 * time.Second, 5000, 3000, true, 0}, // charged 1000, settled 3000 → debt −2000
		{"in debt", time.Minute, 1, 0, false, 61},                                                 // −2000+1000 = −1000: 1001 short → 60.06s
		{"debt paid", 2 * time.Minute, 1, 1, true, 0},
	}
	for _, tt := range tests {
		clk.Advance(tt.advance)
		res, rej := s.Admit(k, tt.est)
		if tt.admit != (rej == nil) {
			t.Fatalf("%s: admitted = %v (%+v)", tt.name, rej == nil, rej)
		}
		if rej != nil {
			if rej.RetryAfter != tt.retry || rej.Type != "tokens" {
				t.Fatalf("%s: %+v, want Retry-After %d", tt.name, rej, tt.retry)
			}
			continue
		}
		switch tt.settle {
		case -1:
			res.Cancel()
		case -2:
		default:
			res.Settle(tt.settle)
		}
	}
}

func TestQuotaUnlimited(t *testing.T) {
	g, k, _ := quotaGateway(t, Quota{})
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
	Reservation{}.Settle(5) // the zero reservation does nothing
	Reservation{}.Cancel()
}

// TestQuotaConcurrent: racing admissions never admit more than the bucket
// holds.
func TestQuotaConcurrent(t *testing.T) {
	g, k, _ := quotaGateway(t, Quota{Interval: time.Hour, Requests: 100, Tokens: 1000})
	s := g.Snapshot()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if res, rej := s.Admit(k, 5); rej == nil {
					admitted.Add(1)
					res.Settle(5)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 100 {
		t.Fatalf("admitted %d, want exactly 100 (the request bucket)", n)
	}
}

// TestQuotaSurvivesReload: a reload keeps a key's spent quota, and applies
// a new limit to it.
func TestQuotaSurvivesReload(t *testing.T) {
	g, k, _ := quotaGateway(t, Quota{Interval: time.Minute, Requests: 2})
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
