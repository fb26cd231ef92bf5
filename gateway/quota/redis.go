package quota

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"
)

// The redis quota backend keeps each key's two buckets (bucket.go) in one
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
// the adjustment and one goroutine per store (started by Start) sends
// what is queued in pipelined batches. When the queue is full or Redis
// fails, the adjustment is lost and counted: the key keeps the charge its
// admission made.
//
// Every replica also charges its own local buckets with what it admits, so
// when Redis cannot answer in time and on_failure is open, this replica's
// buckets decide as if the backend were local, counting what this replica
// already admitted. After a failure, admissions skip Redis for
// retryAfter and then try it again: a Redis that came back is used
// from the next admission on, with no restart.
//
// What the local buckets admit meanwhile is owed to Redis (Shared.owed,
// net of what those requests settle): Redis refilled the key during the
// outage too, and would grant that refill a second time. Each admission
// of a key charges its debt first, in its script, and once Redis answers
// an admission again the settler charges every key what it owes.
// A round trip that failed, timed out included, is taken not to have run:
// a request the local buckets then admit is owed, and a debt it carried
// is owed still. A stalled Redis may run it when it wakes (DEBUG SLEEP
// does, with what a closed connection had sent; CLIENT PAUSE drops it; a
// connection dialed during the stall never sent it): then the key was
// charged twice, one admission too few, never one too many.

// quotaScript adjusts one key's buckets.
//
// KEYS[1]: the hash {r: requests left, t: tokens left, ts: µs of the last
// refill}; a missing hash is a pair of full buckets.
// ARGV: requests capacity, tokens capacity (0: unlimited), interval in µs,
// then "admit", the tokens to charge and the requests and tokens this
// replica owes (charged first, whatever the levels), or "adjust" and the
// requests and tokens to give back (negative: to charge more), levels
// capped.
// Returns {1} when done, {0, 1 or 2 (requests or tokens), µs to wait} when
// admission is refused (only the debt is charged then).
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
local reply = {1}
if ARGV[4] == 'admit' then
  local cost, dr, dt = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  if rc > 0 then r = math.min(rc, r - dr) end
  t = math.min(tc, t - dt)
  local wait, which = 0, 0
  if rc > 0 and r < 1 then wait, which = (1 - r) * iv / rc, 1 end
  if tc > 0 and t < cost then
    local w = (cost - t) * iv / tc
    if w > wait then wait, which = w, 2 end
  end
  if which > 0 then
    reply = {0, which, math.ceil(wait)}
    if dr == 0 and dt == 0 then return reply end
  else
    if rc > 0 then r = r - 1 end
    t = t - cost
  end
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
return reply
`)

const (
	// retryAfter is how long admissions skip Redis after it failed (fail
	// open or closed at once instead of waiting for the timeout).
	retryAfter = time.Second
	// settleQueue bounds the settlements waiting for the settler, and
	// settleBatch the settlements one pipeline sends.
	settleQueue = 4096
	settleBatch = 128
	// settleTimeout bounds one batch's round trip (no client waits on it).
	settleTimeout = time.Second
)

// Redis is a gateway's connection to Redis and its settler. It outlives
// reloads; its connection cannot change.
type Redis struct {
	now     func() int64
	log     zerolog.Logger
	opts    *redis.Options
	client  atomic.Pointer[redis.Client]
	scripts scripts // runs quotaScript: redisScripts, or a test's stand-in
	settles chan settlement
	wake    chan struct{} // tells the settler there are debts to pay (room for one)

	debtMu  sync.Mutex
	debtors []*Shared // the keys with something owed (Shared.listed)

	// Set while running (Start to Stop).
	quit, done chan struct{}

	// downUntil is the clock (ns) until which admissions skip Redis; down
	// says the last attempt failed (for logging transitions).
	downUntil atomic.Int64
	down      atomic.Bool

	fallbacks   atomic.Uint64 // admissions the local buckets decided (on_failure open)
	unavailable atomic.Uint64 // admissions refused for it (on_failure closed)
	lost        atomic.Uint64 // settlements Redis did not take
	replyLogged atomic.Int64  // when replyError last logged (now)
}

// Conn is how to reach Redis.
type Conn struct {
	Address  string
	Username string
	Password string // the password itself ("": none)
	DB       int
	TLS      *tls.Config // nil: plaintext
}

// Policy is how one key's admissions use Redis; a reload may change it.
type Policy struct {
	// KeyPrefix starts the Redis key of the key's buckets; its name
	// follows.
	KeyPrefix string
	// Timeout bounds an admission's wait for Redis.
	Timeout time.Duration
	// FailClosed refuses (Refusal.Unavailable) when Redis cannot answer;
	// else the key's local buckets decide.
	FailClosed bool
}

// Stats are what Redis could not do, counted since NewRedis.
type Stats struct {
	Fallbacks   uint64 // admissions the local buckets decided (on_failure open)
	Unavailable uint64 // admissions refused for it (on_failure closed)
	Lost        uint64 // settlements Redis did not take: it failed, or the queue was full
}

// Shared is one key's buckets on Redis, as one configuration sets them
// (immutable), with the replica's own buckets beside them.
type Shared struct {
	store      *Redis
	local      *Bucket
	redisKey   string
	reqCap     int64
	tokCap     int64
	intervalUs int64
	timeout    time.Duration
	failClosed bool

	// owed is what this replica's own buckets admitted while Redis could
	// not answer, net of what those requests settled since, that Redis
	// was not charged yet; listed says sk is on the store's debtors.
	mu     sync.Mutex
	owed   debt
	listed bool
}

// debt is what Redis is owed: requests and tokens (negative: to give back).
type debt struct{ req, tok float64 }

// settlement is a queued adjustment of a key's buckets.
type settlement struct {
	sk       *Shared
	req, tok float64
}

// Key returns the Limiter of the key name with limit l on Redis, whose
// admissions also charge local, this replica's buckets of the key.
func (st *Redis) Key(name string, l Limit, local *Bucket, p Policy) *Shared {
	return &Shared{
		store: st, local: local, redisKey: p.KeyPrefix + name,
		reqCap: int64(l.Requests), tokCap: int64(l.Tokens), intervalUs: max(l.Interval.Microseconds(), 1),
		timeout: p.Timeout, failClosed: p.FailClosed,
	}
}

// redisLogger drops go-redis's own log lines (plain text on stderr, one per
// failed dial): the store logs a failure of Redis once, as JSON, and
// counts the rest.
type redisLogger struct{}

func (redisLogger) Printf(context.Context, string, ...any) {}

var quietRedis sync.Once

// NewRedis returns a store on c, not yet connected, logging to log on the
// clock now. Start runs its settler.
func NewRedis(c Conn, now func() int64, log zerolog.Logger) *Redis {
	opts := ClientOptions(c)
	st := &Redis{now: now, log: log, opts: opts, settles: make(chan settlement, settleQueue), wake: make(chan struct{}, 1)}
	st.scripts = redisScripts{st}
	st.client.Store(redis.NewClient(opts))
	return st
}

// ClientOptions are a go-redis client's options for c, as the store's own
// client has them (and go-redis's own log lines dropped); another client of
// the same server (gateway/share's) takes them too.
func ClientOptions(c Conn) *redis.Options {
	quietRedis.Do(func() { redis.SetLogger(redisLogger{}) })
	return &redis.Options{
		Addr:      c.Address,
		Username:  c.Username,
		Password:  c.Password,
		DB:        c.DB,
		TLSConfig: c.TLS,
		// Admission bounds its own wait (context deadline); one retry
		// takes a fresh connection after Redis closed the pooled ones.
		ContextTimeoutEnabled: true,
		MaxRetries:            1,
		// One dial per attempt, given up within seconds: the breaker
		// (retryAfter) is what retries a Redis that is down.
		DialTimeout:     2 * time.Second,
		DialerRetries:   1,
		DisableIdentity: true, // no CLIENT SETINFO round trip per connection
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// Start runs the settler, with a fresh client after a Stop; it does
// nothing while running. Start and Stop must not run concurrently.
func (st *Redis) Start() {
	if st.quit != nil {
		return
	}
	if c := st.client.Load(); c == nil {
		st.client.Store(redis.NewClient(st.opts))
	}
	st.quit, st.done = make(chan struct{}), make(chan struct{})
	go st.settle(st.quit, st.done)
}

// Stop sends what is queued, ends the settler and closes the client:
// admissions from now on find Redis unavailable.
func (st *Redis) Stop() {
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

// Stats returns the counts so far.
func (st *Redis) Stats() Stats {
	return Stats{Fallbacks: st.fallbacks.Load(), Unavailable: st.unavailable.Load(), Lost: st.lost.Load()}
}

// Admit charges sk's buckets on Redis, or leaves the decision to the local
// buckets or to the failure mode when Redis cannot answer. It waits for
// Redis up to the policy's timeout.
func (sk *Shared) Admit(est int) (Reservation, Refusal) {
	st := sk.store
	est = max(est, 0)
	cost := int64(0)
	if sk.tokCap > 0 {
		cost = min(int64(est), sk.tokCap)
	}
	if st.now() >= st.downUntil.Load() {
		// What the key owes is charged first, unless the admission tries a
		// Redis that failed: the settler pays once it answered, so a
		// stall's first round trips, which may run late, carry no debt
		// that would then be charged twice.
		var carry debt
		if !st.down.Load() {
			carry = sk.takeOwed()
		}
		v, err := sk.run(cost, carry)
		if err == nil {
			st.recovered()
			if v[0] == 0 {
				over := "requests"
				if v[1] == 2 {
					over = "tokens"
				}
				return Reservation{}, Refusal{Over: over, Wait: waitNs(float64(v[2]) * float64(time.Microsecond))}
			}
			sk.local.charge(float64(cost))
			return Reservation{b: sk.local, tokens: float64(cost), sk: sk}, Refusal{}
		}
		if isReply(err) {
			// A working Redis refused this key (a wrong type at its name, out
			// of memory, read-only): this admission falls back or fails, the
			// other keys keep using Redis. The key's debt cannot be charged.
			st.replyError(sk, err)
			st.dropDebt(carry)
		} else {
			sk.owe(carry) // taken not to have run, timed out or not
			st.failed(err)
		}
	}
	if sk.failClosed {
		st.unavailable.Add(1)
		return Reservation{}, Refusal{Unavailable: true}
	}
	st.fallbacks.Add(1)
	res, ref := sk.local.Admit(est)
	res.fallback = true
	if !ref.Refused() {
		res.sk = sk
		sk.owe(debt{req: 1, tok: res.tokens})
	}
	return res, ref
}

// owe adds d to what sk owes Redis, and tells the settler when Redis
// answers.
func (sk *Shared) owe(d debt) {
	if sk.addOwed(d) && !sk.store.down.Load() {
		sk.store.poke()
	}
}

// addOwed adds d to sk's debt and lists sk among the store's debtors; it
// reports whether sk was listed now.
func (sk *Shared) addOwed(d debt) (listed bool) {
	if d == (debt{}) {
		return false
	}
	sk.mu.Lock()
	sk.owed.req += d.req
	sk.owed.tok += d.tok
	listed, sk.listed = !sk.listed, true
	sk.mu.Unlock()
	if listed {
		st := sk.store
		st.debtMu.Lock()
		st.debtors = append(st.debtors, sk)
		st.debtMu.Unlock()
	}
	return listed
}

// takeOwed returns what sk owes, now owed no more (it stays listed: the
// settler finds nothing).
func (sk *Shared) takeOwed() debt {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	d := sk.owed
	sk.owed = debt{}
	return d
}

// unlist is takeOwed for the settler, which takes sk off the debtors.
func (sk *Shared) unlist() debt {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	d := sk.owed
	sk.owed, sk.listed = debt{}, false
	return d
}

// dropDebt counts a debt Redis refused as lost.
func (st *Redis) dropDebt(d debt) {
	if d != (debt{}) {
		st.lost.Add(1)
	}
}

// poke wakes the settler (it pays the debts unless Redis is down).
func (st *Redis) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// run is the admission's one round trip, bounded by sk.timeout.
func (sk *Shared) run(cost int64, carry debt) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sk.timeout)
	defer cancel()
	v, err := sk.store.scripts.admit(ctx, sk, cost, carry)
	if err == nil && (len(v) == 0 || (v[0] == 0 && len(v) != 3)) {
		err = fmt.Errorf("%w %v", errUnexpectedReply, v)
	}
	return v, err
}

// scripts runs quotaScript's two steps for a store.
type scripts interface {
	// admit runs "admit" on sk's hash, charging carry, then cost tokens,
	// within ctx.
	admit(ctx context.Context, sk *Shared, cost int64, carry debt) ([]int64, error)
	// adjust runs "adjust" for each settlement of batch within ctx; errs
	// is nil when all were done, else each one's error (nil: done).
	adjust(ctx context.Context, batch []settlement) (errs []error)
}

// redisScripts runs the script on the store's Redis.
type redisScripts struct{ st *Redis }

func (r redisScripts) admit(ctx context.Context, sk *Shared, cost int64, carry debt) ([]int64, error) {
	c := r.st.client.Load()
	if c == nil {
		return nil, redis.ErrClosed
	}
	return quotaScript.Run(ctx, c, []string{sk.redisKey}, sk.reqCap, sk.tokCap, sk.intervalUs, "admit", cost,
		carry.req, carry.tok).Int64Slice()
}

// adjust sends batch in one pipeline (EVALSHA; the ones the server's
// script cache lacked again as EVAL).
func (r redisScripts) adjust(ctx context.Context, batch []settlement) []error {
	c := r.st.client.Load()
	if c == nil {
		return failAll(batch, redis.ErrClosed)
	}
	var errs []error
	run := func(idx []int, eval bool) (again []int) {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			s := batch[i]
			keys, args := []string{s.sk.redisKey}, []any{s.sk.reqCap, s.sk.tokCap, s.sk.intervalUs, "adjust", s.req, s.tok}
			if eval {
				cmds[j] = quotaScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[j] = quotaScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
		for j, cmd := range cmds {
			switch err := cmd.Err(); {
			case err == nil:
			case !eval && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, idx[j])
			default:
				if errs == nil {
					errs = make([]error, len(batch))
				}
				errs[idx[j]] = err
			}
		}
		return again
	}
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	if again := run(idx, false); len(again) > 0 {
		run(again, true)
	}
	return errs
}

// failAll is batch's errors when none of it could be sent.
func failAll(batch []settlement, err error) []error {
	errs := make([]error, len(batch))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// isReply reports whether err is an error reply from a Redis that
// answered (or our check of its reply), not a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errUnexpectedReply)
}

var errUnexpectedReply = errors.New("quota script: unexpected reply")

// failed skips Redis for retryAfter and logs the first failure of a
// run of them.
func (st *Redis) failed(err error) {
	st.downUntil.Store(st.now() + int64(retryAfter))
	if !st.down.Swap(true) {
		st.log.Warn().Err(err).Str("address", st.opts.Addr).Msg("quota backend unavailable")
	}
}

// replyError logs an error reply for one key, at most once per
// retryAfter (a key broken on the server fails every admission).
func (st *Redis) replyError(sk *Shared, err error) {
	now := st.now()
	if last := st.replyLogged.Load(); (last == 0 || now-last >= int64(retryAfter)) && st.replyLogged.CompareAndSwap(last, now) {
		st.log.Warn().Err(err).Str("redis_key", sk.redisKey).Msg("quota backend refused a key's admission")
	}
}

// recovered logs the end of a run of failures and has the settler pay
// what the keys owe.
func (st *Redis) recovered() {
	if st.down.Load() && st.down.Swap(false) {
		st.log.Info().Str("address", st.opts.Addr).Msg("quota backend recovered")
		st.poke()
	}
}

// adjust queues an adjustment of sk's buckets for the settler; it never
// blocks. A full queue loses it (counted).
func (sk *Shared) adjust(req, tok float64) {
	select {
	case sk.store.settles <- settlement{sk: sk, req: req, tok: tok}:
	default:
		sk.store.lost.Add(1)
	}
}

// settle sends queued settlements in batches, and the debts when poked,
// until quit, then what is left.
func (st *Redis) settle(quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	batch := make([]settlement, 0, settleBatch)
	for {
		select {
		case s := <-st.settles:
			batch = append(batch[:0], s)
		case <-st.wake:
			batch = batch[:0]
		case <-quit:
			// What is left goes out within one settleTimeout in all: a stop
			// (under the gateway's lock) never waits longer on Redis.
			// While admissions skip Redis, it is given nothing.
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			defer cancel()
			down := st.now() < st.downUntil.Load()
			if st.answers() {
				st.payDebts(ctx) // else they wait for the next Start
			}
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
		st.settleOnce(batch)
	}
}

// settleOnce sends what is queued, after batch, and the keys' debts
// unless admissions skip Redis, within settleTimeout.
func (st *Redis) settleOnce(batch []settlement) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	st.send(ctx, st.drain(batch))
	if st.answers() {
		st.payDebts(ctx)
	}
}

// answers reports whether Redis answered the last admission that tried it
// and admissions do not skip it.
func (st *Redis) answers() bool {
	return !st.down.Load() && st.now() >= st.downUntil.Load()
}

// payDebts charges Redis with what each listed key owes, in batches.
// A debt Redis refused (an error reply) is lost and counted; one whose
// round trip failed otherwise, timed out included, is owed still, for the
// key's next admission or the next time Redis answers again.
func (st *Redis) payDebts(ctx context.Context) {
	st.debtMu.Lock()
	keys := st.debtors
	st.debtors = nil
	st.debtMu.Unlock()
	batch := make([]settlement, 0, min(len(keys), settleBatch))
	for i, sk := range keys {
		if d := sk.unlist(); d != (debt{}) {
			batch = append(batch, settlement{sk: sk, req: -d.req, tok: -d.tok})
		}
		if len(batch) < settleBatch && i < len(keys)-1 || len(batch) == 0 {
			continue
		}
		errs := failAll(batch, ctx.Err())
		if ctx.Err() == nil {
			errs = st.scripts.adjust(ctx, batch)
		}
		for j, err := range errs {
			switch s := batch[j]; {
			case err == nil:
			case isReply(err):
				st.lost.Add(1)
			default:
				s.sk.addOwed(debt{req: -s.req, tok: -s.tok})
			}
		}
		batch = batch[:0]
	}
}

// drain appends queued settlements to batch, up to settleBatch.
func (st *Redis) drain(batch []settlement) []settlement {
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

// send runs batch within ctx and counts what failed.
func (st *Redis) send(ctx context.Context, batch []settlement) {
	if len(batch) == 0 {
		return
	}
	if ctx.Err() != nil {
		st.lost.Add(uint64(len(batch)))
		return
	}
	for _, err := range st.scripts.adjust(ctx, batch) {
		if err != nil {
			st.lost.Add(1)
		}
	}
}
