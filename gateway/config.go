package gateway

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// Config is the gateway's configuration file (gateway/example.yaml shows
// every field). Listen addresses and the proxy's own limits are flags, not
// here. Zero values take the defaults Normalize documents; Validate rejects
// contradictions. A Config must not be modified once handed to New or
// Reload.
type Config struct {
	// Auth is how clients are authenticated: "keys" (an API key from Keys,
	// as "Authorization: Bearer <key>"), "passthrough" (no check here; the
	// client's Authorization goes to the upstream unchanged) or "none".
	// Default: "keys" when Keys is not empty, otherwise "none".
	Auth string `yaml:"auth"`
	// MaxBodyBytes bounds a request body (default 8 MiB, the proxy's
	// --max-body-bytes default; the proxy applies the smaller of the two).
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// QuotaBackend is where the keys' quota buckets live.
	QuotaBackend QuotaBackend `yaml:"quota_backend"`
	// KeyDefaults apply to every key that does not set its own.
	KeyDefaults KeyDefaults `yaml:"key_defaults"`
	// Keys are the API keys (auth: keys only).
	Keys []KeyConfig `yaml:"keys"`
	// Routes map model names to pools. An exact model name wins over a
	// glob; globs are tried in file order.
	Routes []RouteConfig `yaml:"routes"`
	// Pools are groups of interchangeable upstreams.
	Pools []PoolConfig `yaml:"pools"`
	// PrefixIndexEntries is the capacity of the prefix index that
	// least_ttft pools share (gateway/prefix: which upstream last served
	// each prompt prefix; ~20 bytes an entry, allocated whole while a pool
	// uses it). Default 100,000 (prefix.DefaultCapacity).
	PrefixIndexEntries int `yaml:"prefix_index_entries"`
	// ShareRouting shares the least_ttft pools' routing with the other
	// replicas (gateway/share: where each prompt prefix was sent, the
	// tokens, predicted engine time and requests sent each upstream, what
	// each finished request taught its upstream's model): "redis",
	// through the quota backend's Redis (quota_backend kind redis), on
	// the pub/sub channel ShareChannel (default "ttftlens:routing");
	// "" (the default): each replica routes on what it routed itself.
	ShareRouting string `yaml:"share_routing"`
	ShareChannel string `yaml:"share_channel"`

	// Where the config came from, for error messages: file name and the
	// line of every field path. Empty for a Config built in code.
	file  string
	lines map[string]int
}

// KeyDefaults are the settings a key inherits.
type KeyDefaults struct {
	// Quota applies to keys without their own (zero: unlimited).
	Quota Quota `yaml:"quota"`
	// AllowBreakdown lets clients ask for their own Server-Timing
	// breakdown. With auth passthrough or none it applies to every client.
	AllowBreakdown bool `yaml:"allow_breakdown"`
}

// KeyConfig is one API key.
type KeyConfig struct {
	// Name identifies the key in records and logs (the key itself never
	// appears anywhere). Unique.
	Name string `yaml:"name"`
	// Key is "sha256:<64 hex digits>", the SHA-256 of the key (HashKey
	// computes it; `ttftlens hash-key`), or "env:VARNAME" to read
	// the plain key from the environment when the config is loaded.
	Key string `yaml:"key"`
	// Quota overrides KeyDefaults.Quota for this key.
	Quota *Quota `yaml:"quota"`
	// AllowBreakdown overrides KeyDefaults.AllowBreakdown for this key.
	AllowBreakdown *bool `yaml:"allow_breakdown"`
}

// Quota limits one key with two token buckets (see package gateway/quota): Requests
// requests and Tokens tokens (prompt + completion) per Interval, refilled
// continuously. Zero Requests or Tokens means that dimension is unlimited.
type Quota struct {
	// Interval is the refill period (default 1m).
	Interval time.Duration `yaml:"interval"`
	// Requests per Interval (0: unlimited).
	Requests int `yaml:"requests"`
	// Tokens per Interval, prompt and completion together (0: unlimited).
	Tokens int `yaml:"tokens"`
}

func (q Quota) unlimited() bool { return q.Requests == 0 && q.Tokens == 0 }

// QuotaBackend says where the quota buckets live (package gateway/quota): in this
// process (local), or on a Redis server that every replica shares (redis),
// where admission and settlement are atomic on the server.
type QuotaBackend struct {
	// Kind is "local" (the default: each replica's own buckets, so N
	// replicas let a key spend N times its quota) or "redis".
	Kind string `yaml:"kind"`
	// Redis is the shared backend (kind redis only).
	Redis RedisConfig `yaml:"redis"`
}

// RedisConfig is the Redis server of a redis quota backend and how
// admissions use it. A reload may change KeyPrefix, Timeout and OnFailure;
// the connection (address, credentials, database, TLS) takes a restart.
type RedisConfig struct {
	// Address is host:port.
	Address string `yaml:"address"`
	// Username for Redis ACLs ("": the default user).
	Username string `yaml:"username"`
	// Password is "env:VARNAME", read from the environment when the config
	// is loaded ("": none). A plain password is not accepted.
	Password string `yaml:"password"`
	// DB is the database number (default 0).
	DB int `yaml:"db"`
	// TLS, when enabled, encrypts the connection.
	TLS RedisTLS `yaml:"tls"`
	// KeyPrefix starts the Redis key of every API key's buckets (default
	// "ttftlens:quota:"); the key's name follows.
	KeyPrefix string `yaml:"key_prefix"`
	// Timeout bounds how long an admission waits for Redis (default 50ms).
	Timeout time.Duration `yaml:"timeout"`
	// OnFailure is what an admission does when Redis fails or times out:
	// "open" (the default: this replica's own buckets decide, and the
	// record says quota_fallback) or "closed" (503, end detail
	// quota_unavailable).
	OnFailure string `yaml:"on_failure"`
}

// conn is the part of c a reload may not change.
func (c RedisConfig) conn() RedisConfig {
	return RedisConfig{Address: c.Address, Username: c.Username, Password: c.Password, DB: c.DB, TLS: c.TLS}
}

// RedisTLS is the TLS of the connection to Redis.
type RedisTLS struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle to verify the server with ("": the system's).
	CAFile string `yaml:"ca_file"`
	// ServerName is the name to verify ("": the address's host).
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile are a client certificate (mutual TLS), both or
	// neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// RouteConfig sends a model to a pool and sets the model's limits.
type RouteConfig struct {
	// Model is a model name, or a glob where '*' matches any run of bytes
	// and '?' one byte.
	Model string `yaml:"model"`
	// Pool names the pool serving the model.
	Pool string `yaml:"pool"`
	// MaxTokens caps max_tokens / max_completion_tokens (0: no cap). A
	// request asking for more is rejected, not clamped. It is also the
	// quota reservation for a request that does not say.
	MaxTokens int `yaml:"max_tokens"`
	// MaxN is the largest n a request may ask for (default 1).
	MaxN int `yaml:"max_n"`
	// FirstTokenDeadline bounds the time from receipt to the first token
	// (0: the proxy's --first-token-timeout).
	FirstTokenDeadline time.Duration `yaml:"first_token_deadline"`
	// TotalDeadline bounds the whole request (0: the proxy's
	// --total-timeout).
	TotalDeadline time.Duration `yaml:"total_deadline"`
	// MaxFirstTokenDeadline is the longest first-token deadline a request
	// may ask for with X-Ttftlens-TTFT-Deadline-Ms (0: the route's own
	// deadline; a request may always shorten it).
	MaxFirstTokenDeadline time.Duration `yaml:"max_first_token_deadline"`
	// MaxTotalDeadline is the same bound for X-Ttftlens-Deadline-Ms.
	MaxTotalDeadline time.Duration `yaml:"max_total_deadline"`
	// TTFTSLO is the time to first token a request needs unless it says
	// (X-Ttftlens-TTFT-SLO-Ms; 0: none). In a least_ttft pool, a request
	// no upstream is predicted to answer within it is refused at once (429)
	// or, with TTFTSLOFallback, sent to that pool instead.
	TTFTSLO time.Duration `yaml:"ttft_slo"`
	// TTFTSLOFallback names the pool a request goes to when the route's
	// pool cannot meet its TTFT SLO ("": none, it is refused).
	TTFTSLOFallback string `yaml:"ttft_slo_fallback"`
}

// PoolConfig is a group of upstreams serving the same models.
type PoolConfig struct {
	// Name is what routes refer to. Unique.
	Name string `yaml:"name"`
	// Upstreams are base URLs (http or https, no path). An upstream
	// belongs to one pool only, so its in-flight limit means one thing.
	Upstreams []string `yaml:"upstreams"`
	// Policy is how a request's upstream is chosen among those in
	// rotation: PolicyLeastRequest (the default), PolicyRoundRobin,
	// PolicyLeastLoad or PolicyLeastTTFT.
	Policy string `yaml:"policy"`
	// MaxInFlight is the most requests one upstream gets at once (0:
	// unlimited, no admission queue).
	MaxInFlight int `yaml:"max_in_flight"`
	// QueueSize is how many requests may wait for one upstream beyond
	// MaxInFlight (default 256 when MaxInFlight is set).
	QueueSize int `yaml:"queue_size"`
	// QueueMaxWait is the longest a request waits in the queue (default
	// 10s when MaxInFlight is set).
	QueueMaxWait time.Duration `yaml:"queue_max_wait"`
	// Health is the active health check.
	Health HealthConfig `yaml:"health"`
	// Ejection is the passive ejection of failing upstreams.
	Ejection EjectionConfig `yaml:"ejection"`
	// LoadSlack is, in a least_ttft pool, how many requests an upstream
	// may hold past the load bound's share before it is passed over
	// (default DefaultLoadSlack; negative: none, the bound alone).
	LoadSlack int `yaml:"load_slack"`
}

// DefaultLoadSlack is PoolConfig.LoadSlack's default: room for the
// requests that share a prefix to stay where it is cached while loads are
// small (docs/routing.md, "The bound").
const DefaultLoadSlack = 8

// HealthConfig is an active health check: GET <upstream><Path> every
// Interval; a 2xx within Timeout marks the upstream healthy, anything else
// unhealthy. No Path: no active checks (upstreams count as healthy).
type HealthConfig struct {
	// Path is probed on every upstream, e.g. /health.
	Path string `yaml:"path"`
	// Interval between probes (default 5s).
	Interval time.Duration `yaml:"interval"`
	// Timeout of one probe (default 1s; less than Interval).
	Timeout time.Duration `yaml:"timeout"`
}

// EjectionConfig takes an upstream out of rotation for Duration after
// ConsecutiveFailures failed requests in a row (as the proxy reports them
// with Done).
type EjectionConfig struct {
	// ConsecutiveFailures before ejection (default 5; negative: never eject).
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// Duration of an ejection (default 30s).
	Duration time.Duration `yaml:"duration"`
}

// The quota backends and their failure modes.
const (
	QuotaLocal      = "local"
	QuotaRedis      = "redis"
	QuotaFailOpen   = "open"
	QuotaFailClosed = "closed"

	DefaultQuotaKeyPrefix = "ttftlens:quota:"
	// DefaultShareChannel is share_channel's default.
	DefaultShareChannel = "ttftlens:routing"
	// DefaultQuotaTimeout: a loopback or in-cluster round trip to Redis
	// takes well under a millisecond.
	DefaultQuotaTimeout = 50 * time.Millisecond
)

// The auth modes.
const (
	AuthKeys        = "keys"
	AuthPassthrough = "passthrough"
	AuthNone        = "none"
)

// The routing policies (PoolConfig.Policy); ties go round robin.
const (
	// PolicyLeastRequest picks the upstream with the fewest requests this
	// replica has queued for or in flight on it.
	PolicyLeastRequest = "least_request"
	// PolicyRoundRobin takes the upstreams in rotation, whatever their
	// load.
	PolicyRoundRobin = "round_robin"
	// PolicyLeastLoad picks the upstream whose engine reports the least
	// load on its own /metrics (scraped by the proxy), blended with this
	// replica's requests the engine has not yet reported (route.go).
	PolicyLeastLoad = "least_load"
	// PolicyLeastTTFT picks the upstream of the lowest predicted time to
	// first token (gateway/predict), the expected prefix-cache hits
	// (gateway/prefix) counted, under a bound on the load
	// (leastttft.go; docs/routing.md).
	PolicyLeastTTFT = "least_ttft"
)

// policies are the policies in the order the validator names them.
var policies = []string{PolicyLeastRequest, PolicyRoundRobin, PolicyLeastLoad, PolicyLeastTTFT}

// Policies returns every pool policy's name (metric label values).
func Policies() []string { return slices.Clone(policies) }

// The defaults Normalize fills in.
const (
	DefaultMaxBodyBytes     = 8 << 20 // the proxy's --max-body-bytes default
	DefaultQuotaInterval    = time.Minute
	DefaultQueueSize        = 256              // per upstream; deep enough to ride out a burst
	DefaultQueueMaxWait     = 10 * time.Second // well below clients' usual 60s+ timeouts
	DefaultHealthInterval   = 5 * time.Second
	DefaultHealthTimeout    = time.Second
	DefaultEjectionFailures = 5 // one failure is noise; five in a row is a sick upstream
	DefaultEjectionDuration = 30 * time.Second
)

func (b *QuotaBackend) normalize() {
	if b.Kind == "" {
		b.Kind = QuotaLocal
	}
	if b.Kind != QuotaRedis {
		return
	}
	r := &b.Redis
	r.KeyPrefix = cmp.Or(r.KeyPrefix, DefaultQuotaKeyPrefix)
	r.Timeout = cmp.Or(r.Timeout, DefaultQuotaTimeout)
	r.OnFailure = cmp.Or(r.OnFailure, QuotaFailOpen)
}

// Normalize fills the defaults documented on each field. Call it after
// Validate: Validate sees the zero values as "not set", which is how it
// finds contradictions such as a queue without an in-flight limit.
func (c *Config) Normalize() {
	if c.Auth == "" {
		c.Auth = AuthNone
		if len(c.Keys) > 0 {
			c.Auth = AuthKeys
		}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.PrefixIndexEntries == 0 {
		c.PrefixIndexEntries = prefix.DefaultCapacity
	}
	if c.ShareRouting != "" && c.ShareChannel == "" {
		c.ShareChannel = DefaultShareChannel
	}
	c.QuotaBackend.normalize()
	normQuota := func(q *Quota) {
		if q.Interval == 0 && !q.unlimited() {
			q.Interval = DefaultQuotaInterval
		}
	}
	normQuota(&c.KeyDefaults.Quota)
	for i := range c.Keys {
		if q := c.Keys[i].Quota; q != nil {
			normQuota(q)
		}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.MaxN == 0 {
			r.MaxN = 1
		}
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Policy == "" {
			p.Policy = PolicyLeastRequest
		}
		if p.MaxInFlight > 0 {
			if p.QueueSize == 0 {
				p.QueueSize = DefaultQueueSize
			}
			if p.QueueMaxWait == 0 {
				p.QueueMaxWait = DefaultQueueMaxWait
			}
		}
		if p.Health.Path != "" {
			if p.Health.Interval == 0 {
				p.Health.Interval = DefaultHealthInterval
			}
			if p.Health.Timeout == 0 {
				p.Health.Timeout = min(DefaultHealthTimeout, p.Health.Interval/2)
			}
		}
		if p.Ejection.ConsecutiveFailures == 0 {
			p.Ejection.ConsecutiveFailures = DefaultEjectionFailures
		}
		if p.Ejection.Duration == 0 {
			p.Ejection.Duration = DefaultEjectionDuration
		}
	}
}

// Validate reports every problem in c, each naming the field (and, for a
// parsed file, the file and line): the first line of the returned error is
// the first problem in file order. Plain keys given as env:VARNAME must be
// set in the environment.
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.check()
	return v.errs.err()
}

type validator struct {
	c    *Config
	errs errorList
}

// uniqueName checks the name of list[i] (a key or pool: what) is given and
// not taken, and records it in seen (name → index + 1).
func (v *validator) uniqueName(seen map[string]int, list, what, name string, i int) {
	p := fmt.Sprintf("%s[%d].name", list, i)
	switch {
	case name == "":
		v.add(p, "missing")
	case seen[name] > 0:
		v.add(p, "duplicate %s name %q (also %s[%d])", what, name, list, seen[name]-1)
	default:
		seen[name] = i + 1
	}
}

// nonNegative reports n at path if it is negative.
func nonNegative[N ~int | ~int64](v *validator, path string, n N) {
	if n < 0 {
		v.add(path, "must not be negative")
	}
}

func (v *validator) add(path, format string, args ...any) {
	v.errs.add(v.c.file, v.c.line(path), path, fmt.Sprintf(format, args...))
}

// check checks the whole config, in file order.
func (v *validator) check() {
	v.checkAuth()
	nonNegative(v, "max_body_bytes", v.c.MaxBodyBytes)
	v.checkQuotaBackend()
	v.checkQuota("key_defaults.quota", &v.c.KeyDefaults.Quota)
	v.checkKeys()
	pools := v.checkPools()
	v.checkRoutes(pools)
	nonNegative(v, "prefix_index_entries", v.c.PrefixIndexEntries)
	v.checkShareRouting()
}

// checkShareRouting checks share_routing: redis, through the quota
// backend's Redis, or nothing.
func (v *validator) checkShareRouting() {
	switch c := v.c; {
	case c.ShareRouting == "" && c.ShareChannel != "":
		v.add("share_channel", "given but share_routing is not set: set share_routing: redis")
	case c.ShareRouting == "":
	case c.ShareRouting != QuotaRedis:
		v.add("share_routing", "must be redis or empty, not %q", c.ShareRouting)
	case c.QuotaBackend.Kind != QuotaRedis:
		v.add("share_routing", "redis shares routing through the quota backend's Redis: set quota_backend kind: redis and its address")
	}
}

// checkAuth checks the auth mode and that keys are listed exactly when it
// checks them.
func (v *validator) checkAuth() {
	c := v.c
	switch c.Auth {
	case "", AuthKeys, AuthPassthrough, AuthNone:
	default:
		v.add("auth", "must be keys, passthrough or none, not %q", c.Auth)
	}
	if c.Auth == AuthKeys && len(c.Keys) == 0 {
		v.add("auth", "auth is keys but no keys are listed")
	}
	if (c.Auth == AuthPassthrough || c.Auth == AuthNone) && len(c.Keys) > 0 {
		v.add("keys", "keys are listed but auth is %s, which never checks them", c.Auth)
	}
}

// checkKeys checks every key has a unique name, a key that resolves and
// differs from the others, and a valid quota.
func (v *validator) checkKeys() {
	names := make(map[string]int, len(v.c.Keys))
	hashes := make(map[[32]byte]int, len(v.c.Keys))
	for i := range v.c.Keys {
		k := &v.c.Keys[i]
		p := fmt.Sprintf("keys[%d]", i)
		v.uniqueName(names, "keys", "key", k.Name, i)
		if k.Key == "" {
			v.add(p+".key", "missing: give sha256:<hex> or env:VARNAME")
		} else if h, err := resolveKey(k.Key); err != nil {
			v.add(p+".key", "%s", err)
		} else if j, dup := hashes[h]; dup {
			v.add(p+".key", "same key as keys[%d]", j)
		} else {
			hashes[h] = i
		}
		if k.Quota != nil {
			v.checkQuota(p+".quota", k.Quota)
		}
	}
}

// checkPools checks every pool and returns their names (name → index + 1).
func (v *validator) checkPools() map[string]int {
	pools := make(map[string]int, len(v.c.Pools))
	addrs := make(map[string]string) // upstream address → the field that lists it first
	for i := range v.c.Pools {
		pl := &v.c.Pools[i]
		p := fmt.Sprintf("pools[%d]", i)
		v.uniqueName(pools, "pools", "pool", pl.Name, i)
		v.checkUpstreams(p, pl.Upstreams, addrs)
		if pl.Policy != "" && !slices.Contains(policies, pl.Policy) {
			v.add(p+".policy", "must be %s or %s, not %q%s", strings.Join(policies[:len(policies)-1], ", "),
				policies[len(policies)-1], pl.Policy, didYouMean(pl.Policy, policies))
		}
		v.checkQueue(p, pl)
		if pl.LoadSlack != 0 && pl.Policy != PolicyLeastTTFT {
			v.add(p+".load_slack", "the pool routes by %s: only %s has a load bound with slack", cmp.Or(pl.Policy, PolicyLeastRequest), PolicyLeastTTFT)
		}
		v.checkHealth(p+".health", &pl.Health)
		nonNegative(v, p+".ejection.duration", pl.Ejection.Duration)
	}
	return pools
}

// checkUpstreams checks the upstream URLs of pool p, none of them listed
// before (addrs: address → the field that lists it).
func (v *validator) checkUpstreams(p string, upstreams []string, addrs map[string]string) {
	if len(upstreams) == 0 {
		v.add(p+".upstreams", "a pool needs at least one upstream")
	}
	for j, raw := range upstreams {
		up := fmt.Sprintf("%s.upstreams[%d]", p, j)
		u, err := parseUpstreamURL(raw)
		if err != nil {
			v.add(up, "%s", err)
			continue
		}
		if other, dup := addrs[u.key]; dup {
			v.add(up, "upstream %s is already in %s", raw, other)
			continue
		}
		addrs[u.key] = up
	}
}

// checkQueue checks the admission limits of pool p.
func (v *validator) checkQueue(p string, pl *PoolConfig) {
	nonNegative(v, p+".max_in_flight", pl.MaxInFlight)
	nonNegative(v, p+".queue_size", pl.QueueSize)
	nonNegative(v, p+".queue_max_wait", pl.QueueMaxWait)
	if pl.MaxInFlight == 0 && pl.QueueSize > 0 {
		v.add(p+".queue_size", "a queue needs max_in_flight: without it nothing ever waits")
	}
	if pl.MaxInFlight == 0 && pl.QueueMaxWait > 0 {
		v.add(p+".queue_max_wait", "a queue needs max_in_flight: without it nothing ever waits")
	}
}

// checkHealth checks a pool's health check, at path p.
func (v *validator) checkHealth(p string, h *HealthConfig) {
	if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
		v.add(p+".path", "must start with /, not %q", h.Path)
	}
	nonNegative(v, p+".interval", h.Interval)
	nonNegative(v, p+".timeout", h.Timeout)
	if h.Path == "" && (h.Interval != 0 || h.Timeout != 0) {
		v.add(p, "interval and timeout need a path to probe")
	}
	if h.Interval > 0 && h.Timeout >= h.Interval {
		v.add(p+".timeout", "timeout %s must be shorter than the interval %s", h.Timeout, h.Interval)
	}
}

// checkRoutes checks every route: a unique model pattern, a known pool
// (pools: name → index + 1), and its limits and deadlines.
func (v *validator) checkRoutes(pools map[string]int) {
	if len(v.c.Routes) == 0 {
		v.add("routes", "no routes: every model would be unknown")
	}
	models := make(map[string]int, len(v.c.Routes))
	for i := range v.c.Routes {
		r := &v.c.Routes[i]
		p := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Model == "":
			v.add(p+".model", "missing")
		case models[r.Model] > 0:
			v.add(p+".model", "duplicate route for %q (also routes[%d])", r.Model, models[r.Model]-1)
		default:
			models[r.Model] = i + 1
			if strings.ContainsAny(r.Model, `[]\`) {
				v.add(p+".model", "%q: only * and ? are glob characters; [, ] and \\ are not allowed", r.Model)
			}
		}
		switch {
		case r.Pool == "":
			v.add(p+".pool", "missing")
		case pools[r.Pool] == 0:
			v.add(p+".pool", "unknown pool %q", r.Pool)
		}
		nonNegative(v, p+".max_tokens", r.MaxTokens)
		nonNegative(v, p+".max_n", r.MaxN)
		v.checkDeadlines(p, r)
		v.checkSLO(p, r, pools)
	}
}

// checkSLO checks route p's TTFT SLO: only a least_ttft pool predicts
// what it is held to, and its fallback is another known pool.
func (v *validator) checkSLO(p string, r *RouteConfig, pools map[string]int) {
	nonNegative(v, p+".ttft_slo", r.TTFTSLO)
	if i := pools[r.Pool]; i > 0 && (r.TTFTSLO > 0 || r.TTFTSLOFallback != "") && v.c.Pools[i-1].Policy != PolicyLeastTTFT {
		v.add(p+".ttft_slo", "pool %q routes by %s: only a %s pool predicts the TTFT an SLO needs", r.Pool, cmp.Or(v.c.Pools[i-1].Policy, PolicyLeastRequest), PolicyLeastTTFT)
	}
	switch f := r.TTFTSLOFallback; {
	case f == "":
	case pools[f] == 0:
		v.add(p+".ttft_slo_fallback", "unknown pool %q", f)
	case f == r.Pool:
		v.add(p+".ttft_slo_fallback", "%q is the route's own pool", f)
	}
}

// checkDeadlines checks route p's deadlines are not negative, within their
// maximums, and that the first-token deadline can fire before the total.
func (v *validator) checkDeadlines(p string, r *RouteConfig) {
	nonNegative(v, p+".first_token_deadline", r.FirstTokenDeadline)
	nonNegative(v, p+".total_deadline", r.TotalDeadline)
	nonNegative(v, p+".max_first_token_deadline", r.MaxFirstTokenDeadline)
	nonNegative(v, p+".max_total_deadline", r.MaxTotalDeadline)
	if r.MaxFirstTokenDeadline > 0 && r.FirstTokenDeadline > r.MaxFirstTokenDeadline {
		v.add(p+".max_first_token_deadline", "%s is shorter than first_token_deadline %s", r.MaxFirstTokenDeadline, r.FirstTokenDeadline)
	}
	if r.MaxTotalDeadline > 0 && r.TotalDeadline > r.MaxTotalDeadline {
		v.add(p+".max_total_deadline", "%s is shorter than total_deadline %s", r.MaxTotalDeadline, r.TotalDeadline)
	}
	if r.TotalDeadline > 0 && r.FirstTokenDeadline > r.TotalDeadline {
		v.add(p+".first_token_deadline", "%s is longer than total_deadline %s: it could never fire", r.FirstTokenDeadline, r.TotalDeadline)
	}
}

// checkQuotaBackend checks the backend's kind and, for redis, how to reach
// it and what to do when it cannot be reached.
func (v *validator) checkQuotaBackend() {
	const p = "quota_backend"
	b := &v.c.QuotaBackend
	switch b.Kind {
	case "", QuotaLocal:
		if b.Redis != (RedisConfig{}) {
			v.add(p+".redis", "redis settings given but kind is %s: set kind: redis", cmp.Or(b.Kind, QuotaLocal))
		}
		return
	case QuotaRedis:
	default:
		v.add(p+".kind", "must be local or redis, not %q", b.Kind)
		return
	}
	r := &b.Redis
	if r.Address == "" {
		v.add(p+".redis.address", "missing: give host:port")
	} else if err := checkHostPort(r.Address); err != nil {
		v.add(p+".redis.address", "%s", err)
	}
	if r.Password != "" {
		if _, err := resolveSecret(r.Password); err != nil {
			v.add(p+".redis.password", "%s", err)
		}
	}
	nonNegative(v, p+".redis.db", r.DB)
	t := &r.TLS
	if !t.Enabled && *t != (RedisTLS{}) {
		v.add(p+".redis.tls", "tls settings given but not enabled: set enabled: true")
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		v.add(p+".redis.tls", "a client certificate needs both cert_file and key_file")
	}
	nonNegative(v, p+".redis.timeout", r.Timeout)
	switch r.OnFailure {
	case "", QuotaFailOpen, QuotaFailClosed:
	default:
		v.add(p+".redis.on_failure", "must be open or closed, not %q", r.OnFailure)
	}
}

// checkHostPort checks addr is host:port with a port from 1 to 65535.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port must be a number from 1 to 65535", addr)
	}
	return nil
}

// resolveSecret reads a secret given as env:VARNAME. The error never
// contains the value.
func resolveSecret(s string) (string, error) {
	name, ok := strings.CutPrefix(s, "env:")
	switch {
	case !ok:
		return "", fmt.Errorf("must be env:VARNAME (a plain password is not accepted)")
	case name == "":
		return "", fmt.Errorf("env: needs a variable name")
	}
	val, set := os.LookupEnv(name)
	switch {
	case !set:
		return "", fmt.Errorf("environment variable %s is not set", name)
	case val == "":
		return "", fmt.Errorf("environment variable %s is empty", name)
	}
	return val, nil
}

func (v *validator) checkQuota(p string, q *Quota) {
	nonNegative(v, p+".interval", q.Interval)
	nonNegative(v, p+".requests", q.Requests)
	nonNegative(v, p+".tokens", q.Tokens)
	if q.Interval > 0 && q.unlimited() {
		v.add(p, "an interval with neither requests nor tokens limits nothing")
	}
}

// HashKey returns the form of key to put in a config file's key field:
// "sha256:" and the hex SHA-256 of the key.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:])
}

// resolveKey turns a key field into the key's hash. The error never
// contains the key.
func resolveKey(s string) ([32]byte, error) {
	var h [32]byte
	switch {
	case strings.HasPrefix(s, "sha256:"):
		hx := s[len("sha256:"):]
		if len(hx) != 64 {
			return h, fmt.Errorf("sha256: needs 64 hex digits, got %d", len(hx))
		}
		if _, err := hex.Decode(h[:], []byte(hx)); err != nil {
			return h, fmt.Errorf("sha256: not hex")
		}
		return h, nil
	case strings.HasPrefix(s, "env:"):
		k, err := resolveSecret(s)
		if err != nil {
			return h, err
		}
		return sha256.Sum256([]byte(k)), nil
	}
	// Never echo the value: it may be a plain key pasted by mistake.
	return h, fmt.Errorf("must be sha256:<hex> or env:VARNAME (a plain key is not accepted; use HashKey)")
}

type upstreamURL struct {
	base string // scheme://host[:port], no trailing slash
	name string // host[:port] as written: the upstream's name in records
	key  string // scheme://host:port, for duplicate detection
}

func parseUpstreamURL(raw string) (upstreamURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return upstreamURL{}, fmt.Errorf("%q is not a URL: want http://host:port", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return upstreamURL{}, fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return upstreamURL{}, fmt.Errorf("%q: no host", raw)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return upstreamURL{}, fmt.Errorf("%q: give the server's base URL (no path, query or user)", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return upstreamURL{
		base: u.Scheme + "://" + u.Host,
		name: u.Host,
		key:  u.Scheme + "://" + u.Hostname() + ":" + port,
	}, nil
}

// line returns the line of path in the parsed file, or of its nearest
// parent that has one (0 when c was not parsed).
func (c *Config) line(path string) int {
	for path != "" {
		if l, ok := c.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return c.lines[""]
}
