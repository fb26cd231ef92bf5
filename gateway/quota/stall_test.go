package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// stallRedis stands in for Redis running quotaScript (the same arithmetic,
// on the test's clock) that can stall like `DEBUG SLEEP`: every call
// made during a stall times out, and the calls it held run when it ends
// (late), as Redis runs what it had read, or never (a partition).
type stallRedis struct {
	clk      *clock.Fake
	timeout  time.Duration // what a stalled admission waits
	levels   map[string]*levels
	stalled  bool
	late     bool
	held     []func()
	timeouts int // admissions that timed out
}

type levels struct {
	r, t float64
	ts   int64
}

// level returns sk's hash, refilled to now (a missing hash is full).
func (f *stallRedis) level(sk *Shared) *levels {
	now := int64(f.clk.Now())
	l, ok := f.levels[sk.redisKey]
	if !ok {
		l = &levels{r: float64(sk.reqCap), t: float64(sk.tokCap), ts: now}
		f.levels[sk.redisKey] = l
	}
	iv := float64(sk.intervalUs) * float64(time.Microsecond)
	if dt := float64(now - l.ts); dt > 0 {
		l.r = min(float64(sk.reqCap), l.r+dt*float64(sk.reqCap)/iv)
		l.t = min(float64(sk.tokCap), l.t+dt*float64(sk.tokCap)/iv)
		l.ts = now
	}
	return l
}

func (f *stallRedis) runAdmit(sk *Shared, cost int64, carry debt) []int64 {
	l := f.level(sk)
	if sk.reqCap > 0 {
		l.r = min(float64(sk.reqCap), l.r-carry.req)
	}
	l.t = min(float64(sk.tokCap), l.t-carry.tok)
	if sk.reqCap > 0 && l.r < 1 {
		iv := float64(sk.intervalUs)
		return []int64{0, 1, int64((1 - l.r) * iv / float64(sk.reqCap))}
	}
	if sk.tokCap > 0 && l.t < float64(cost) {
		iv := float64(sk.intervalUs)
		return []int64{0, 2, int64((float64(cost) - l.t) * iv / float64(sk.tokCap))}
	}
	if sk.reqCap > 0 {
		l.r--
	}
	l.t -= float64(cost)
	return []int64{1}
}

func (f *stallRedis) runAdjust(s settlement) {
	l := f.level(s.sk)
	l.r = min(float64(s.sk.reqCap), l.r+s.req)
	l.t = min(float64(s.sk.tokCap), l.t+s.tok)
}

func (f *stallRedis) admit(ctx context.Context, sk *Shared, cost int64, carry debt) ([]int64, error) {
	if f.stalled {
		f.timeouts++
		f.hold(func() { f.runAdmit(sk, cost, carry) })
		f.clk.Advance(f.timeout)
		return nil, context.DeadlineExceeded
	}
	return f.runAdmit(sk, cost, carry), nil
}

func (f *stallRedis) adjust(ctx context.Context, batch []settlement) []error {
	for _, s := range batch {
		if f.stalled {
			f.hold(func() { f.runAdjust(s) })
		} else {
			f.runAdjust(s)
		}
	}
	if f.stalled {
		return failAll(batch, context.DeadlineExceeded)
	}
	return nil
}

func (f *stallRedis) hold(call func()) {
	if f.late {
		f.held = append(f.held, call)
	}
}

// stall starts or ends a stall; at its end, what it held runs.
func (f *stallRedis) stall(on bool) {
	f.stalled = on
	if !on {
		for _, call := range f.held {
			call()
		}
		f.held = nil
	}
}

// TestStallAdmitsWithinTheBound is a Redis stall on one replica: a key
// of 20 requests per 10 s, 20 requests a second offered for 14 s, Redis
// stalled twice for 2 s (`DEBUG SLEEP 2`), on_failure open. A bucket
// admits at most 20 + 14 × 2 = 48 in that time; what this replica's own
// buckets admit while Redis cannot answer is charged to Redis once it
// answers again, so the stall's refill is not granted twice. An admission
// that timed out is taken not to have run: the key never gets one too
// many, and one too few for each whose script ran late.
func TestStallAdmitsWithinTheBound(t *testing.T) {
	const (
		gap     = 50 * time.Millisecond // 20 requests a second
		offered = 14 * time.Second
		bound   = 20 + 2*14
	)
	stalls := [][2]time.Duration{{3 * time.Second, 5 * time.Second}, {8 * time.Second, 10 * time.Second}}
	tests := []struct {
		name   string
		late   bool          // the calls a stall held run when it ends
		settle time.Duration // how often the settler runs
	}{
		{"DEBUG SLEEP: held calls run late", true, gap},
		{"partition: held calls never run", false, gap},
		{"the settler behind: admissions pay their key's debt", true, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock.Fake{}
			now := nowOf(clk)
			fake := &stallRedis{clk: clk, timeout: gap, levels: map[string]*levels{}, late: tc.late}
			st := NewRedis(Conn{}, now, zerolog.Nop())
			st.scripts = fake
			l := Limit{Interval: 10 * time.Second, Requests: 20}
			k := st.Key("k", l, NewBucket(l, now), Policy{Timeout: gap})
			admitted, settled := 0, time.Duration(0)
			// A timed-out admission moves the clock on by its wait.
			for start := clk.Now(); clk.Now()-start < offered; clk.Advance(gap) {
				at := clk.Now() - start
				stalled := false
				for _, s := range stalls {
					stalled = stalled || s[0] <= at && at < s[1]
				}
				if stalled != fake.stalled {
					fake.stall(stalled)
				}
				if _, ref := k.Admit(0); !ref.Refused() {
					admitted++
				}
				if at >= settled+tc.settle {
					st.settleOnce(nil)
					settled = at
				}
			}
			least := bound - 1 // the last refill may fall after the last request
			if tc.late {
				least -= fake.timeouts
			}
			if admitted > bound || admitted < least {
				t.Fatalf("admitted %d in %v, want %d to %d (the bucket, less one per timed-out admission whose script ran late)",
					admitted, offered, least, bound)
			}
			t.Logf("admitted %d, %d timed out", admitted, fake.timeouts)
		})
	}
}

// TestOwedNetsSettlements: what the local buckets admit while Redis cannot
// answer (the admission that timed out too) is owed, net of what those
// requests settle or cancel, and paid by the settler once Redis answers
// an admission again.
func TestOwedNetsSettlements(t *testing.T) {
	clk := &clock.Fake{}
	now := nowOf(clk)
	fake := &stallRedis{clk: clk, timeout: time.Millisecond, levels: map[string]*levels{}}
	st := NewRedis(Conn{}, now, zerolog.Nop())
	st.scripts = fake
	l := Limit{Interval: time.Hour, Requests: 5, Tokens: 1000}
	k := st.Key("k", l, NewBucket(l, now), Policy{Timeout: time.Millisecond})
	fake.stall(true) // a partition: what it holds never runs
	timed, _ := k.Admit(100)
	b, _ := k.Admit(100) // Redis skipped: owed
	c, _ := k.Admit(200)
	for i, res := range []Reservation{timed, b, c} {
		if !res.Fallback() {
			t.Fatalf("admission %d not a fallback", i)
		}
	}
	b.Settle(50) // 50 of its 100 back
	c.Cancel()   // all of it back
	if got, want := k.owed, (debt{req: 2, tok: 150}); got != want {
		t.Fatalf("owed %+v, want %+v", got, want)
	}
	fake.stall(false)
	clk.Advance(retryAfter)
	if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
		t.Fatalf("Redis back: %+v (fallback %v)", ref, res.Fallback())
	}
	st.settleOnce(nil) // Redis answered: the settler pays what is owed
	// 5 − 1 now − 2 owed; 1000 − 150 owed.
	if lv := fake.level(k); lv.r != 2 || lv.t != 850 || k.owed != (debt{}) {
		t.Fatalf("on Redis r %v t %v, owed %+v; want 2, 850, nothing", lv.r, lv.t, k.owed)
	}
}

// replyError is an error reply from Redis.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// failingScripts answers every adjustment with err.
type failingScripts struct {
	err  error
	sent int
}

func (f *failingScripts) admit(context.Context, *Shared, int64, debt) ([]int64, error) {
	return []int64{1}, nil
}

func (f *failingScripts) adjust(_ context.Context, batch []settlement) []error {
	f.sent += len(batch)
	if f.err == nil {
		return nil
	}
	return failAll(batch, f.err)
}

// TestPayDebtOutcomes: a debt Redis took is paid; one Redis refused is
// lost and counted; one whose round trip failed otherwise (timed out, or
// never sent) is owed still.
func TestPayDebtOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		noTime   bool // the settler's time ran out before the send
		owedLeft bool
		lost     uint64
	}{
		{"taken", nil, false, false, 0},
		{"timed out", context.DeadlineExceeded, false, true, 0},
		{"refused", replyError("WRONGTYPE"), false, false, 1},
		{"unreachable", errors.New("connection refused"), false, true, 0},
		{"no time left", nil, true, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock.Fake{}
			fake := &failingScripts{err: tc.err}
			st := NewRedis(Conn{}, nowOf(clk), zerolog.Nop())
			st.scripts = fake
			l := Limit{Interval: time.Hour, Requests: 5}
			k := st.Key("k", l, NewBucket(l, nowOf(clk)), Policy{})
			k.owe(debt{req: 2})
			ctx, cancel := context.WithCancel(context.Background())
			if tc.noTime {
				cancel()
			}
			st.payDebts(ctx)
			cancel()
			if left := k.owed != (debt{}); left != tc.owedLeft || st.Stats().Lost != tc.lost {
				t.Fatalf("owed %+v, lost %d; want owed left %v, lost %d", k.owed, st.Stats().Lost, tc.owedLeft, tc.lost)
			}
			if tc.noTime != (fake.sent == 0) {
				t.Fatalf("sent %d", fake.sent)
			}
			if tc.owedLeft && (!k.listed || len(st.debtors) != 1) {
				t.Fatal("a debt owed still is not listed for the next payment")
			}
		})
	}
}
