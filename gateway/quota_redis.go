package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ttftlens/ttftlens/endreason"
)

// The redis quota backend keeps each key's two buckets (quota.go) in one
// Redis hash, so that every replica admits against the same levels. A Lua
// script does the whole admission on the server, atomically: refill from
// the server's own clock (TIME, so replicas with skewed clocks agree),
// check both buckets, charge them. One EVALSHA per admission (EVAL once
// when the server's script cache is empty, after a restart).
//
// We chose a script of our own over go-redis/redis_rate: redis_rate is
// GCRA for one limit, and a key has two (requests and tokens) that must be
// charged together or not at all, and a token charge that is only an
// estimate until the response ends, settled (refunded or charged more)
// then. The script does both with the same bucket arithmetic as the local
// backend, so a key's quota means the same on either.
//
// Settlement never waits on Redis in the request: Settle and Cancel queue
// the adjustment and one goroutine per gateway (started by Start) sends
// what is queued in pipelined batches. When the queue is full or Redis
// fails, the adjustment is lost and counted: the key keeps the charge its
// admission made.
//
// Every replica also charges its own local buckets with what it admits, so
// when Redis cannot answer in time and on_failure is open, this replica's
// buckets decide as if the backend were local, counting what this replica
// already admitted. After a failure, admissions skip Redis for
// redisRetryAfter and then try it again: a Redis that came back is used
// from the next admission on, with no restart.

// quotaScript adjusts one key's buckets.
//
// KEYS[1]: the hash {r: requests left, t: tokens left, ts: µs of the last
// refill}; a missing hash is a pair of full buckets.
// ARGV: requests capacity, tokens capacity (0: unlimited), interval in µs,
// then "admit" and the tokens to charge, or "adjust" and the requests and
// tokens to give back (negative: to charge more), levels capped.
// Returns {1} when done, {0, 1 or 2 (requests or tokens), µs to wait} when
// admission is refused (nothing changes then).
var quotaScript = redis.NewScript(`
local now = redis.call('TIME')
now = now[1] * 1000000 + now[2]
local rc, tc, iv = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local s = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')
local r, t, ts = math.min(tonumber(s[1]) or rc, rc), math.min(tonumber(s[2]) or tc, tc), tonumber(s[3])
if ts == nil then ts = now end
if now > ts then
  r = math.min(rc, r + (now - ts) * rc / iv)
  t = math.min(tc, t + (now - ts) * tc / iv)
  ts = now
end
if ARGV[4] == 'admit' then
  local cost = tonumber(ARGV[5])
  local wait, which = 0, 0
  if rc > 0 and r < 1 then wait, which = (1 - r) * iv / rc, 1 end
  if tc > 0 and t < cost then
    local w = (cost - t) * iv / tc
    if w > wait then wait, which = w, 2 end
  end
  if which > 0 then return {0, which, math.ceil(wait)} end
  if rc > 0 then r = r - 1 end
  t = t - cost
else
  r = math.min(rc, r + tonumber(ARGV[5]))
  t = math.min(tc, t + tonumber(ARGV[6]))
end
redis.call('HSET', KEYS[1], 'r', r, 't', t, 'ts', string.format('%.0f', ts))
-- Gone once both buckets are full again: a missing hash is full buckets.
local full = 0
if rc > 0 then full = math.max(full, (rc - r) * iv / rc) end
if tc > 0 then full = math.max(full, (tc - t) * iv / tc) end
redis.call('PEXPIRE', KEYS[1], math.ceil(full / 1000) + 1000)
return {1}
`)

const (
	// redisRetryAfter is how long admissions skip Redis after it failed
	// (fail open or closed at once instead of waiting for the timeout).
	redisRetryAfter = time.Second
	// settleQueue bounds the settlements waiting for the settler, and
	// settleBatch the settlements one pipeline sends.
	settleQueue = 4096
	settleBatch = 128
	// settleTimeout bounds one batch's round trip (no client waits on it).
	settleTimeout = time.Second
)

// redisStore is a gateway's connection to Redis and its settler. It
// outlives reloads; the connection settings cannot change.
type redisStore struct {
	g       *Gateway
	conn    RedisConfig // what it was made with (RedisConfig.conn)
	opts    *redis.Options
	client  atomic.Pointer[redis.Client]
	settles chan settlement

	// Set while running (Start to Stop); g.mu guards them.
	quit, done chan struct{}

	// downUntil is the gateway clock (ns) until which admissions skip
	// Redis; down says the last attempt failed (for logging transitions).
	downUntil atomic.Int64
	down      atomic.Bool

	fallbacks   atomic.Uint64 // admissions the local buckets decided (on_failure open)
	unavailable atomic.Uint64 // admissions refused for it (on_failure closed)
	lost        atomic.Uint64 // settlements Redis did not take
	replyLogged atomic.Int64  // when replyError last logged (g.now)
}

// sharedKey is one key's buckets on the redis backend, as one Snapshot
// configures them (immutable).
type sharedKey struct {
	store      *redisStore
	redisKey   string
	reqCap     int64
	tokCap     int64
	intervalUs int64
	timeout    time.Duration
	failClosed bool
}

// settlement is a queued adjustment of a key's buckets.
type settlement struct {
	sk       *sharedKey
	req, tok float64
}

// quotaStore returns the store a config with backend b uses: nil for the
// local backend, else the gateway's, made on first use. g.mu is held.
func (g *Gateway) quotaStore(b *QuotaBackend) (*redisStore, error) {
	if b.Kind != QuotaRedis {
		return nil, nil
	}
	if g.redis == nil {
		return newRedisStore(g, b.Redis)
	}
	if g.redis.conn != b.Redis.conn() {
		return nil, fmt.Errorf("quota_backend.redis: the connection (address, username, password, db, tls) cannot change on reload: restart to apply it")
	}
	return g.redis, nil
}

// quotaRedis is the gateway's redis store, nil while no config used one.
func (g *Gateway) quotaRedis() *redisStore {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.redis
}

func newSharedKey(st *redisStore, c *RedisConfig, name string, q Quota) *sharedKey {
	return &sharedKey{
		store: st, redisKey: c.KeyPrefix + name,
		reqCap: int64(q.Requests), tokCap: int64(q.Tokens), intervalUs: max(q.Interval.Microseconds(), 1),
		timeout: c.Timeout, failClosed: c.OnFailure == QuotaFailClosed,
	}
}

// redisLogger drops go-redis's own log lines (plain text on stderr, one per
// failed dial): the gateway logs a failure of Redis once, as JSON, and
// counts the rest.
type redisLogger struct{}

func (redisLogger) Printf(context.Context, string, ...any) {}

var quietRedis sync.Once

func newRedisStore(g *Gateway, c RedisConfig) (*redisStore, error) {
	quietRedis.Do(func() { redis.SetLogger(redisLogger{}) })
	opts := &redis.Options{
		Addr:     c.Address,
		Username: c.Username,
		DB:       c.DB,
		// Admission bounds its own wait (context deadline); one retry
		// takes a fresh connection after Redis closed the pooled ones.
		ContextTimeoutEnabled: true,
		MaxRetries:            1,
		// One dial per attempt, given up within seconds: the breaker
		// (redisRetryAfter) is what retries a Redis that is down.
		DialTimeout:     2 * time.Second,
		DialerRetries:   1,
		DisableIdentity: true, // no CLIENT SETINFO round trip per connection
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
	if c.Password != "" {
		pw, err := resolveSecret(c.Password)
		if err != nil {
			return nil, fmt.Errorf("quota_backend.redis.password: %w", err)
		}
		opts.Password = pw
	}
	if c.TLS.Enabled {
		tc, err := redisTLS(c)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig = tc
	}
	st := &redisStore{g: g, conn: c.conn(), opts: opts, settles: make(chan settlement, settleQueue)}
	st.client.Store(redis.NewClient(opts))
	return st, nil
}

func redisTLS(c RedisConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLS.ServerName}
	if c.TLS.CAFile != "" {
		pem, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("quota_backend.redis.tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("quota_backend.redis.tls.ca_file: %s holds no PEM certificate", c.TLS.CAFile)
		}
	}
	if c.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("quota_backend.redis.tls: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// start runs the settler, with a fresh client after a stop. g.mu is held.
func (st *redisStore) start() {
	if c := st.client.Load(); c == nil {
		st.client.Store(redis.NewClient(st.opts))
	}
	st.quit, st.done = make(chan struct{}), make(chan struct{})
	go st.settle(st.quit, st.done)
}

// stop sends what is queued, ends the settler and closes the client:
// admissions from now on find Redis unavailable. g.mu is held.
func (st *redisStore) stop() {
	if st.quit == nil {
		return
	}
	close(st.quit)
	<-st.done
	st.quit, st.done = nil, nil
	if c := st.client.Swap(nil); c != nil {
		_ = c.Close()
	}
}

// admit charges sk's buckets on Redis, or leaves the decision to b (this
// replica's buckets) or to the failure mode when Redis cannot answer.
func (sk *sharedKey) admit(b *bucket, est int) (Reservation, *Rejection) {
	st := sk.store
	cost := int64(0)
	if sk.tokCap > 0 {
		cost = min(int64(est), sk.tokCap)
	}
	if now := st.g.now(); now >= st.downUntil.Load() {
		v, err := sk.run(cost)
		if err == nil {
			st.recovered()
			if v[0] == 0 {
				which := "requests"
				if v[1] == 2 {
					which = "tokens"
				}
				return Reservation{}, quotaRejection(which, float64(v[2])*float64(time.Microsecond))
			}
			b.charge(st.g.now(), float64(cost))
			return Reservation{b: b, tokens: float64(cost), sk: sk}, nil
		}
		switch {
		case isReply(err):
			// A working Redis refused this key (a wrong type at its name, out
			// of memory, read-only): this admission falls back or fails, the
			// other keys keep using Redis.
			st.replyError(sk, err)
		case errors.Is(err, context.DeadlineExceeded):
			// The script may have run after all: give back what it may have
			// charged (at worst one admission too many, levels are capped).
			sk.adjust(1, float64(cost))
			st.failed(err)
		default:
			st.failed(err)
		}
	}
	if sk.failClosed {
		st.unavailable.Add(1)
		return Reservation{}, rejQuotaUnavailable
	}
	st.fallbacks.Add(1)
	res, rej := b.admit(st.g.now(), est)
	res.fallback = true
	return res, rej
}

// run is the admission's one round trip, bounded by sk.timeout.
func (sk *sharedKey) run(cost int64) ([]int64, error) {
	c := sk.store.client.Load()
	if c == nil {
		return nil, redis.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), sk.timeout)
	defer cancel()
	v, err := quotaScript.Run(ctx, c, []string{sk.redisKey}, sk.reqCap, sk.tokCap, sk.intervalUs, "admit", cost).Int64Slice()
	if err == nil && (len(v) == 0 || (v[0] == 0 && len(v) != 3)) {
		err = fmt.Errorf("%w %v", errUnexpectedReply, v)
	}
	return v, err
}

// isReply reports whether err is an error reply from a Redis that
// answered (or our check of its reply), not a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errUnexpectedReply)
}

var errUnexpectedReply = errors.New("quota script: unexpected reply")

// failed skips Redis for redisRetryAfter and logs the first failure of a
// run of them.
func (st *redisStore) failed(err error) {
	st.downUntil.Store(st.g.now() + int64(redisRetryAfter))
	if !st.down.Swap(true) {
		st.g.log.Warn().Err(err).Str("address", st.opts.Addr).Msg("quota backend unavailable")
	}
}

// replyError logs an error reply for one key, at most once per
// redisRetryAfter (a key broken on the server fails every admission).
func (st *redisStore) replyError(sk *sharedKey, err error) {
	now := st.g.now()
	if last := st.replyLogged.Load(); (last == 0 || now-last >= int64(redisRetryAfter)) && st.replyLogged.CompareAndSwap(last, now) {
		st.g.log.Warn().Err(err).Str("redis_key", sk.redisKey).Msg("quota backend refused a key's admission")
	}
}

// recovered logs the end of a run of failures.
func (st *redisStore) recovered() {
	if st.down.Load() && st.down.Swap(false) {
		st.g.log.Info().Str("address", st.opts.Addr).Msg("quota backend recovered")
	}
}

// adjust queues an adjustment of sk's buckets for the settler; it never
// blocks. A full queue loses it (counted).
func (sk *sharedKey) adjust(req, tok float64) {
	select {
	case sk.store.settles <- settlement{sk: sk, req: req, tok: tok}:
	default:
		sk.store.lost.Add(1)
	}
}

// settle sends queued settlements in batches until quit, then what is left.
func (st *redisStore) settle(quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	batch := make([]settlement, 0, settleBatch)
	for {
		select {
		case s := <-st.settles:
			batch = append(batch[:0], s)
		case <-quit:
			// What is left goes out within one settleTimeout in all: a stop
			// (under the gateway's lock) never waits longer on Redis.
			// While admissions skip Redis, it is given nothing.
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			defer cancel()
			down := st.g.now() < st.downUntil.Load()
			for {
				batch = st.drain(batch[:0])
				if len(batch) == 0 {
					return
				}
				if down {
					st.lost.Add(uint64(len(batch)))
					continue
				}
				st.send(ctx, batch)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		st.send(ctx, st.drain(batch))
		cancel()
	}
}

// drain appends queued settlements to batch, up to settleBatch.
func (st *redisStore) drain(batch []settlement) []settlement {
	for len(batch) < settleBatch {
		select {
		case s := <-st.settles:
			batch = append(batch, s)
		default:
			return batch
		}
	}
	return batch
}

// send runs batch in one pipeline (EVALSHA; the ones the server's script
// cache lacked again as EVAL) within ctx and counts what failed.
func (st *redisStore) send(ctx context.Context, batch []settlement) {
	c := st.client.Load()
	if c == nil || ctx.Err() != nil {
		st.lost.Add(uint64(len(batch)))
		return
	}
	run := func(batch []settlement, eval bool) []settlement {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, s := range batch {
			keys, args := []string{s.sk.redisKey}, []any{s.sk.reqCap, s.sk.tokCap, s.sk.intervalUs, "adjust", s.req, s.tok}
			if eval {
				cmds[i] = quotaScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = quotaScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
		var again []settlement
		for i, cmd := range cmds {
			switch err := cmd.Err(); {
			case err == nil:
			case !eval && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, batch[i])
			default:
				st.lost.Add(1)
			}
		}
		return again
	}
	if again := run(batch, false); len(again) > 0 {
		run(again, true)
	}
}

var rejQuotaUnavailable = &Rejection{
	Status: 503, RetryAfter: 1, Type: "server_error", Code: "quota_unavailable",
	Message: "The quota service is unavailable; retry shortly.",
	// worker_failure, not policy_block: our own infrastructure refused,
	// not the key's usage, and a retry may pass (like no_healthy_upstream).
	Reason: endreason.WorkerFailure, Detail: endreason.DetailQuotaUnavailable,
}
