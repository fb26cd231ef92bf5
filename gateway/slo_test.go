package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway/predict"
)

// TestSLOHeader: the header replaces the route's ttft_slo, longer or
// shorter; a value that is not a positive whole number is refused.
func TestSLOHeader(t *testing.T) {
	r := &Route{TTFTSLO: 800 * time.Millisecond}
	for _, tt := range []struct {
		h    string
		want time.Duration
		bad  bool
	}{
		{"", 800 * time.Millisecond, false},
		{"250", 250 * time.Millisecond, false},
		{"5000", 5 * time.Second, false},
		{"0", 0, true},
		{"-5", 0, true},
		{"1.5", 0, true},
		{"99999999999999999999", 0, true},
	} {
		got, rej := r.SLO([]byte(tt.h))
		if tt.bad {
			if rej == nil || rej.Status != 400 || rej.Param != HeaderTTFTSLO {
				t.Errorf("SLO(%q) = %v, %+v; want a 400 naming the header", tt.h, got, rej)
			}
			continue
		}
		if rej != nil || got != tt.want {
			t.Errorf("SLO(%q) = %v, %v; want %v", tt.h, got, rej, tt.want)
		}
	}
	if got, _ := (&Route{}).SLO(nil); got != 0 {
		t.Errorf("no SLO anywhere: %v", got)
	}
}

// TestRefuseSLO: a choice is refused only when its prediction, with the
// time already spent, is over the SLO; the refusal is a 429 with the
// excess as Retry-After (at least 1 s) and its own end detail.
func TestRefuseSLO(t *testing.T) {
	predicted := func(total time.Duration) *Choice {
		c := &Choice{Predicted: true}
		c.Prediction.Total = total
		return c
	}
	for _, tt := range []struct {
		name       string
		c          *Choice
		slo, spent time.Duration
		retryAfter int // 0: not refused
	}{
		{"no slo", predicted(time.Hour), 0, 0, 0},
		{"cold model", &Choice{}, time.Millisecond, 0, 0},
		{"met", predicted(400 * time.Millisecond), 500 * time.Millisecond, 50 * time.Millisecond, 0},
		{"met exactly", predicted(450 * time.Millisecond), 500 * time.Millisecond, 50 * time.Millisecond, 0},
		{"missed by the time spent", predicted(480 * time.Millisecond), 500 * time.Millisecond, 30 * time.Millisecond, 1},
		{"missed by 2.2 s", predicted(2700 * time.Millisecond), 500 * time.Millisecond, 0, 3},
		{"a probe past it", &Choice{Predicted: true, Probe: true, PastSLO: true, Prediction: predict.Prediction{Total: time.Hour}}, 500 * time.Millisecond, 0, 0},
	} {
		rej := RefuseSLO(tt.c, tt.slo, tt.spent)
		switch {
		case tt.retryAfter == 0 && rej != nil:
			t.Errorf("%s: refused: %+v", tt.name, rej)
		case tt.retryAfter == 0:
		case rej == nil:
			t.Errorf("%s: not refused", tt.name)
		case rej.Status != 429 || rej.RetryAfter != tt.retryAfter || rej.Reason != endreason.Deadline ||
			rej.Detail != endreason.DetailSLOUnmeetable || !strings.Contains(rej.Message, HeaderTTFTSLO):
			t.Errorf("%s: %+v; want 429, Retry-After %d, deadline/%s", tt.name, rej, tt.retryAfter, endreason.DetailSLOUnmeetable)
		}
	}
}

// TestSLOFallbackRoute: a route with ttft_slo_fallback has a Fallback
// route on that pool, with the route's own limits, and no fallback of its
// own.
func TestSLOFallbackRoute(t *testing.T) {
	cfg := &Config{
		Routes: []RouteConfig{{Model: "m", Pool: "p", MaxTokens: 64, TTFTSLO: time.Second, TTFTSLOFallback: "big"}},
		Pools: []PoolConfig{
			{Name: "p", Upstreams: []string{"http://10.0.0.1:8000"}, Policy: PolicyLeastTTFT},
			{Name: "big", Upstreams: []string{"http://10.0.0.2:8000"}},
		},
	}
	g, _ := newGateway(t, cfg, Options{})
	r := g.Snapshot().Routes()[0]
	f := r.Fallback
	if f == nil || f.Pool.Name != "big" || f.Fallback != nil || f.MaxTokens != 64 || f.Model != "m" || r.Pool.Name != "p" {
		t.Fatalf("route %+v, fallback %+v", r, f)
	}
}
