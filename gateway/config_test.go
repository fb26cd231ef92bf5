package gateway

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.err golden files")

// TestConfigErrorsGolden parses every testdata/bad-*.yaml and compares the
// error with bad-*.err (go test -run Golden -update rewrites them).
func TestConfigErrorsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/bad-*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, perr := Parse(data, filepath.Base(f))
			if perr == nil {
				t.Fatal("parsed without error")
			}
			got := perr.Error() + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("error differs from %s\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
			var ce *ConfigError
			if !errors.As(perr, &ce) {
				t.Errorf("error is not a *ConfigError: %T", perr)
			}
			// A key never appears in an error.
			if strings.Contains(got, "sk-live") {
				t.Errorf("error echoes a key: %s", got)
			}
		})
	}
}

// TestExampleLeastTTFT holds docs/routing.md's "Try it on one machine"
// config to what the page says of it.
func TestExampleLeastTTFT(t *testing.T) {
	c, err := Load("example-least-ttft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth != AuthNone || len(c.Routes) != 1 || len(c.Pools) != 1 {
		t.Fatalf("unexpected shape: %+v", c)
	}
	p, r := c.Pools[0], c.Routes[0]
	want := []string{"http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"}
	if p.Policy != PolicyLeastTTFT || !slices.Equal(p.Upstreams, want) || r.Model != "ttftlens-ref" || r.Pool != p.Name {
		t.Errorf("pool %+v, route %+v: want ttftlens-ref to a least_ttft pool of the engines on %v", p, r, want)
	}
	// The page's first requests compute their prompts (a second or two):
	// an SLO on the route would refuse them.
	if r.TTFTSLO != 0 {
		t.Errorf("route ttft_slo %v: the page's walk-through needs none", r.TTFTSLO)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("normalized config does not validate: %v", err)
	}
	if _, err := New(c, Options{Probe: okProbe}); err != nil {
		t.Fatal(err)
	}
}

func TestExampleConfig(t *testing.T) {
	t.Setenv("TTFTLENS_BATCH_KEY", "batch-secret")
	c, err := Load("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth != AuthKeys || len(c.Keys) != 2 || len(c.Routes) != 2 || len(c.Pools) != 2 {
		t.Fatalf("unexpected shape: %+v", c)
	}
	// Defaults filled for what the example leaves out.
	b := c.Pools[1]
	if b.MaxInFlight != 0 || b.QueueSize != 0 || b.Ejection.ConsecutiveFailures != DefaultEjectionFailures ||
		b.Ejection.Duration != DefaultEjectionDuration || b.Health.Interval != 0 {
		t.Errorf("gpu-b defaults: %+v", b)
	}
	if c.Pools[0].Policy != PolicyLeastLoad || b.Policy != PolicyLeastTTFT {
		t.Errorf("policies %q and %q, want least_load and least_ttft as written", c.Pools[0].Policy, b.Policy)
	}
	if r := c.Routes[1]; r.TTFTSLO != 2*time.Second || r.TTFTSLOFallback != "gpu-a" {
		t.Errorf("qwen route's SLO %v, fallback %q", r.TTFTSLO, r.TTFTSLOFallback)
	}
	if c.Routes[1].MaxN != 1 {
		t.Errorf("max_n default: %d", c.Routes[1].MaxN)
	}
	if q := c.Keys[1].Quota; q.Interval != time.Hour || q.Tokens != 5000000 || q.Requests != 0 {
		t.Errorf("batch-jobs quota: %+v", q)
	}
	// The example's first key is sha256("test").
	if got := HashKey("test"); got != c.Keys[0].Key {
		t.Errorf("HashKey(test) = %s, example has %s", got, c.Keys[0].Key)
	}
	// Normalize and Validate agree: a normalized config validates.
	if err := c.Validate(); err != nil {
		t.Errorf("normalized config does not validate: %v", err)
	}
	g, err := New(c, Options{Probe: okProbe})
	if err != nil {
		t.Fatal(err)
	}
	s := g.Snapshot()
	if k, rej := s.Authenticate([]byte("Bearer batch-secret")); rej != nil || k.Name != "batch-jobs" {
		t.Errorf("env key: %v %v", k, rej)
	}
	if got := string(s.AppendModels(nil)); got != `{"object":"list","data":[{"id":"llama-3.1-70b-instruct","object":"model","created":0,"owned_by":"ttftlens"}]}` {
		t.Errorf("models: %s", got)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`
pools:
  - name: p
    upstreams: [http://a]
    max_in_flight: 2
    health: {path: /health}
routes:
  - {model: m, pool: p}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pools[0]
	if c.Auth != AuthNone || c.MaxBodyBytes != DefaultMaxBodyBytes || p.QueueSize != DefaultQueueSize ||
		p.QueueMaxWait != DefaultQueueMaxWait || p.Health.Interval != DefaultHealthInterval ||
		p.Health.Timeout != DefaultHealthTimeout {
		t.Errorf("defaults: %+v %+v", c, p)
	}
}

// TestValidateInCode checks Validate on configs built in code: errors name
// the field, without a file or line.
func TestValidateInCode(t *testing.T) {
	base := func() *Config {
		return &Config{
			Pools:  []PoolConfig{{Name: "p", Upstreams: []string{"http://127.0.0.1:1"}}},
			Routes: []RouteConfig{{Model: "m", Pool: "p"}},
		}
	}
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   string // "" = valid
	}{
		{"valid", func(c *Config) {}, ""},
		{"unknown pool", func(c *Config) { c.Routes[0].Pool = "q" }, `routes[0].pool: unknown pool "q"`},
		{"keys auth without keys", func(c *Config) { c.Auth = AuthKeys }, "auth: auth is keys but no keys are listed"},
		{"negative in flight", func(c *Config) { c.Pools[0].MaxInFlight = -1 }, "pools[0].max_in_flight: must not be negative"},
		{"negative quota tokens", func(c *Config) { c.KeyDefaults.Quota.Tokens = -1 }, "key_defaults.quota.tokens: must not be negative"},
		{"negative health timeout", func(c *Config) { c.Pools[0].Health.Timeout = -time.Second }, "pools[0].health.timeout: must not be negative"},
		{"negative bound", func(c *Config) { c.Routes[0].MaxTotalDeadline = -time.Second }, "routes[0].max_total_deadline: must not be negative"},
		{"wait without limit", func(c *Config) { c.Pools[0].QueueMaxWait = time.Second }, "pools[0].queue_max_wait: a queue needs max_in_flight"},
		{"ttft over total", func(c *Config) {
			c.Routes[0].FirstTokenDeadline, c.Routes[0].TotalDeadline = 2*time.Second, time.Second
		}, "routes[0].first_token_deadline: 2s is longer than total_deadline 1s"},
		{"bound under deadline", func(c *Config) {
			c.Routes[0].FirstTokenDeadline, c.Routes[0].MaxFirstTokenDeadline = 2*time.Second, time.Second
		}, "routes[0].max_first_token_deadline: 1s is shorter than first_token_deadline 2s"},
		{"same key twice", func(c *Config) {
			c.Keys = []KeyConfig{{Name: "a", Key: HashKey("x")}, {Name: "b", Key: HashKey("x")}}
		}, "keys[1].key: same key as keys[0]"},
		{"empty env key", func(c *Config) {
			t.Setenv("TTFTLENS_TEST_EMPTY_KEY", "")
			c.Keys = []KeyConfig{{Name: "a", Key: "env:TTFTLENS_TEST_EMPTY_KEY"}}
		}, "keys[0].key: environment variable TTFTLENS_TEST_EMPTY_KEY is empty"},
		{"no pools", func(c *Config) { c.Pools = nil }, `routes[0].pool: unknown pool "p"`},
		{"glob with class", func(c *Config) { c.Routes[0].Model = "m[0-9]" }, "routes[0].model"},
		{"slo without predictions", func(c *Config) { c.Routes[0].TTFTSLO = time.Second },
			`routes[0].ttft_slo: pool "p" routes by least_request: only a least_ttft pool predicts`},
		{"slo", func(c *Config) { c.Pools[0].Policy, c.Routes[0].TTFTSLO = PolicyLeastTTFT, time.Second }, ""},
		{"negative slo", func(c *Config) { c.Pools[0].Policy, c.Routes[0].TTFTSLO = PolicyLeastTTFT, -time.Second },
			"routes[0].ttft_slo: must not be negative"},
		{"unknown fallback", func(c *Config) { c.Pools[0].Policy, c.Routes[0].TTFTSLOFallback = PolicyLeastTTFT, "q" },
			`routes[0].ttft_slo_fallback: unknown pool "q"`},
		{"fallback to itself", func(c *Config) { c.Pools[0].Policy, c.Routes[0].TTFTSLOFallback = PolicyLeastTTFT, "p" },
			`routes[0].ttft_slo_fallback: "p" is the route's own pool`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("no error, want %q", tt.want)
			case tt.want != "" && !strings.HasPrefix(err.Error(), tt.want):
				t.Fatalf("error %q, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestHashKey(t *testing.T) {
	// sha256("abc"), FIPS 180-2 appendix B.1.
	const want = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := HashKey("abc"); got != want {
		t.Fatalf("HashKey(abc) = %s", got)
	}
	if _, err := resolveKey(want); err != nil {
		t.Fatalf("HashKey output does not resolve: %v", err)
	}
}

// FuzzParse: the parser never panics, and whatever it accepts is valid and
// normalized (parsing is idempotent through Validate + Normalize).
func FuzzParse(f *testing.F) {
	for _, name := range []string{"example.yaml", "testdata/bad-types.yaml", "testdata/bad-routes.yaml", "testdata/bad-syntax.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("routes: &r\n  - {model: m, pool: p}\npools: [{name: p, upstreams: [http://x]}]\n"))
	f.Add([]byte("pools: [{name: p, upstreams: [http://x], ejection: {consecutive_failures: -1}}]\nroutes: [{model: '*', pool: p}]"))
	f.Add([]byte("u: &u [a, a, a, a]\npools: [{upstreams: *u}, {upstreams: *u}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A slow parse is a bug too (alias expansion, quadratic errors).
		wd := time.AfterFunc(5*time.Second, func() { panic("Parse took over 5s") })
		defer wd.Stop()
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not validate after Normalize: %v", err)
		}
		before := *c
		c.Normalize()
		if c.Auth != before.Auth || c.MaxBodyBytes != before.MaxBodyBytes {
			t.Fatal("Normalize is not idempotent")
		}
	})
}
