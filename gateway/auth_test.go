package gateway

import (
	"fmt"
	"math"
	"testing"
)

func TestAuthenticate(t *testing.T) {
	cfg := &Config{
		KeyDefaults: KeyDefaults{AllowBreakdown: true},
		Keys: []KeyConfig{
			{Name: "alice", Key: HashKey("sk-alice")},
			{Name: "bob", Key: HashKey("sk-bob"), AllowBreakdown: new(false)},
		},
		Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		Pools:  onePool("http://127.0.0.1:1"),
	}
	g, _ := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	tests := []struct {
		header    string
		wantKey   string
		wantCode  string
		breakdown bool
	}{
		{"Bearer sk-alice", "alice", "", true},
		{"bearer sk-alice", "alice", "", true},
		{"BEARER   sk-alice  ", "alice", "", true},
		{"Bearer sk-bob", "bob", "", false},
		{"", "", "missing_api_key", false},
		{"Bearer", "", "missing_api_key", false},
		{"Bearer ", "", "missing_api_key", false},
		{"Basic c2stYWxpY2U=", "", "missing_api_key", false},
		{"sk-alice", "", "missing_api_key", false},
		{"Bearer sk-alicE", "", "invalid_api_key", false},
		{"Bearer sk-alice-and-more", "", "invalid_api_key", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.header), func(t *testing.T) {
			k, rej := s.Authenticate([]byte(tt.header))
			if tt.wantCode != "" {
				if rej == nil || rej.Code != tt.wantCode || rej.Status != 401 || rej.Reason.String() != "policy_block" {
					t.Fatalf("got %v %+v, want rejection %s", k, rej, tt.wantCode)
				}
				if k != nil {
					t.Fatal("key returned with a rejection")
				}
				return
			}
			if rej != nil || k == nil || k.Name != tt.wantKey {
				t.Fatalf("got %v %+v, want key %s", k, rej, tt.wantKey)
			}
			if s.AllowBreakdown(k) != tt.breakdown {
				t.Errorf("AllowBreakdown = %v", !tt.breakdown)
			}
		})
	}
}

func TestAuthenticateModes(t *testing.T) {
	for _, mode := range []string{AuthPassthrough, AuthNone} {
		t.Run(mode, func(t *testing.T) {
			cfg := &Config{
				Auth: mode, KeyDefaults: KeyDefaults{AllowBreakdown: true},
				Routes: []RouteConfig{{Model: "m", Pool: "p"}}, Pools: onePool("http://127.0.0.1:1"),
			}
			g, _ := newGateway(t, cfg, Options{})
			for _, h := range []string{"", "Bearer whatever", "garbage"} {
				k, rej := g.Authenticate([]byte(h))
				if k != nil || rej != nil {
					t.Fatalf("%s with %q: %v %v", mode, h, k, rej)
				}
			}
			if !g.Snapshot().AllowBreakdown(nil) {
				t.Error("key_defaults.allow_breakdown not applied without a key")
			}
		})
	}
}

func TestAuthenticateManyKeys(t *testing.T) {
	cfg := manyKeysConfig(10000, 1)
	g, _ := newGateway(t, cfg, Options{})
	s := g.Snapshot()
	for _, i := range []int{0, 1, 4999, 9999} {
		k, rej := s.Authenticate(fmt.Appendf(nil, "Bearer %s", testKey(i)))
		if rej != nil || k.Name != fmt.Sprintf("key-%d", i) {
			t.Fatalf("key %d: %v %v", i, k, rej)
		}
	}
	if _, rej := s.Authenticate([]byte("Bearer " + testKey(10000))); rej == nil {
		t.Fatal("unknown key accepted")
	}
}

func testKey(i int) string { return fmt.Sprintf("sk-test-%08d-0123456789abcdef", i) }

// manyKeysConfig is nKeys keys with generous quotas and nRoutes routes over
// ten pools of two upstreams (the benchmark's shape).
func manyKeysConfig(nKeys, nRoutes int) *Config {
	cfg := &Config{Auth: AuthKeys}
	for i := range nKeys {
		cfg.Keys = append(cfg.Keys, KeyConfig{Name: fmt.Sprintf("key-%d", i), Key: HashKey(testKey(i))})
	}
	cfg.KeyDefaults.Quota = Quota{Requests: 1 << 30, Tokens: math.MaxInt32} // as generous on 32 bits
	for i := range 10 {
		cfg.Pools = append(cfg.Pools, PoolConfig{
			Name:        fmt.Sprintf("pool-%d", i),
			Upstreams:   []string{fmt.Sprintf("http://10.0.%d.1:8000", i), fmt.Sprintf("http://10.0.%d.2:8000", i)},
			MaxInFlight: 1 << 20,
		})
	}
	for i := range nRoutes {
		m := fmt.Sprintf("model-%d", i)
		if i%10 == 9 {
			m = fmt.Sprintf("family-%d-*", i)
		}
		cfg.Routes = append(cfg.Routes, RouteConfig{Model: m, Pool: fmt.Sprintf("pool-%d", i%10), MaxTokens: 4096})
	}
	return cfg
}
