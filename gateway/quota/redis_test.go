//go:build integration

package quota

import (
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/redistest"
)

// replica is one gateway's redis store on r, started (its settler runs),
// on its own clock.
type replica struct {
	st  *Redis
	clk *clock.Fake
}

func newReplica(t *testing.T, r *redistest.Server) replica {
	t.Helper()
	clk := &clock.Fake{}
	st := NewRedis(Conn{Address: r.Addr}, nowOf(clk), zerolog.Nop())
	st.Start()
	t.Cleanup(st.Stop)
	return replica{st: st, clk: clk}
}

// key is the replica's Limiter of key name, with its own local buckets.
func (rp replica) key(name string, l Limit, p Policy) *Shared {
	return rp.st.Key(name, l, NewBucket(l, nowOf(rp.clk)), p)
}

// policy is a policy on r with a key prefix of the test's own and
// redistest's long timeout.
func policy(r *redistest.Server, failClosed bool) Policy {
	return Policy{KeyPrefix: r.KeyPrefix(), Timeout: redistest.Timeout, FailClosed: failClosed}
}

// waitLevel waits until field f ("r" or "t") of the key's hash on r is
// want (settlements land asynchronously).
func waitLevel(t *testing.T, r *redistest.Server, key, f string, want float64) {
	t.Helper()
	var got string
	for range 500 {
		got, _ = r.Get("HGET", key, f)
		if v, err := strconv.ParseFloat(got, 64); err == nil && v > want-0.5 && v < want+0.5 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s.%s = %q, want %v", key, f, got, want)
}

// TestRedisShared: two replicas on one Redis spend one key's quota
// together, requests and tokens, with the local backend's arithmetic
// (the wait, settlement, cancel).
func TestRedisShared(t *testing.T) {
	r := redistest.Start(t)
	a, b := newReplica(t, r), newReplica(t, r)

	t.Run("requests", func(t *testing.T) {
		l, p := Limit{Interval: time.Hour, Requests: 3}, policy(r, false)
		p.KeyPrefix += "req:"
		ka, kb := a.key("k", l, p), b.key("k", l, p)
		for i, k := range []*Shared{ka, kb, ka} {
			if _, ref := k.Admit(0); ref.Refused() {
				t.Fatalf("admission %d: %+v", i, ref)
			}
		}
		res, ref := kb.Admit(0)
		// One request refills every 20 minutes: nearly all of it is to wait.
		if ref.Over != "requests" || ref.Wait <= 1100*time.Second || ref.Wait > 1200*time.Second || res.Fallback() {
			t.Fatalf("4th admission across replicas: %+v (fallback %v)", ref, res.Fallback())
		}
	})

	t.Run("tokens", func(t *testing.T) {
		l, p := Limit{Interval: time.Hour, Tokens: 1000}, policy(r, false)
		ka, kb := a.key("k", l, p), b.key("k", l, p)
		resA, ref := ka.Admit(600)
		if ref.Refused() {
			t.Fatal(ref)
		}
		// 400 left; 600 needs 200 more, 720s of refill at 1000/h.
		if _, ref := kb.Admit(600); ref.Over != "tokens" || ref.Wait <= 700*time.Second || ref.Wait > 720*time.Second {
			t.Fatalf("over the shared tokens: %+v", ref)
		}
		resA.Settle(100) // 500 back, on Redis once the settler sends it
		waitLevel(t, r, p.KeyPrefix+"k", "t", 900)
		resB, ref := kb.Admit(600)
		if ref.Refused() {
			t.Fatalf("after the refund: %+v", ref)
		}
		resB.Cancel()
		waitLevel(t, r, p.KeyPrefix+"k", "t", 900)
	})
}

// TestRedisFailure: with Redis stopped, the policy decides (fail open:
// this replica's buckets, which counted what it admitted through Redis,
// flagged and counted; fail closed: Unavailable), admissions skip Redis for
// retryAfter after a failure, and a Redis that is back is used again
// without a restart, charged with what the replica's buckets admitted
// meanwhile.
func TestRedisFailure(t *testing.T) {
	type want struct {
		over        string
		unavailable bool
	}
	tests := []struct {
		name       string
		failClosed bool
		down       []want // each admission while Redis is down
		left       int    // on Redis after the first admission once it is back
	}{
		{"open", false, []want{{}, {}, {over: "requests"}}, 0}, // 3 a replica, one spent through Redis; the two owed
		{"closed", true, []want{{unavailable: true}, {unavailable: true}, {unavailable: true}}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := redistest.Start(t)
			rp := newReplica(t, r)
			p := policy(r, tc.failClosed)
			k := rp.key("k", Limit{Interval: time.Hour, Requests: 3}, p)
			if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
				t.Fatalf("with Redis up: %+v (fallback %v)", ref, res.Fallback())
			}
			r.Stop()
			for i, w := range tc.down {
				res, ref := k.Admit(0)
				if ref.Over != w.over || ref.Unavailable != w.unavailable || res.Fallback() == tc.failClosed {
					t.Fatalf("down, admission %d: %+v (fallback %v), want %+v", i, ref, res.Fallback(), w)
				}
			}
			n := rp.st.Stats()
			if !tc.failClosed && (n.Fallbacks != 3 || n.Unavailable != 0) || tc.failClosed && (n.Fallbacks != 0 || n.Unavailable != 3) {
				t.Fatalf("stats: %+v", n)
			}
			r.Start() // empty: a restarted Redis without persistence has full buckets
			if res, _ := k.Admit(0); !tc.failClosed && !res.Fallback() {
				t.Fatal("Redis tried again before retryAfter")
			}
			rp.clk.Advance(retryAfter)
			if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
				t.Fatalf("Redis back: %+v (fallback %v)", ref, res.Fallback())
			}
			waitLevel(t, r, p.KeyPrefix+"k", "r", float64(tc.left)) // the settler pays what is owed
			for i := range tc.left {
				if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
					t.Fatalf("Redis back, admission %d: %+v (fallback %v)", i+1, ref, res.Fallback())
				}
			}
			if _, ref := k.Admit(0); ref.Over != "requests" {
				t.Fatalf("Redis back, over the quota: %+v", ref)
			}
		})
	}
}

// TestRedisTimeout: a Redis that does not answer within the timeout counts
// as down: the admission falls back instead of waiting for it, and what
// the local buckets admitted is charged once Redis answers again.
func TestRedisTimeout(t *testing.T) {
	r := redistest.Start(t)
	p := policy(r, false)
	// Long enough that a Redis that is up answers in time however loaded
	// the machine (the first admission dials and loads the script).
	p.Timeout = 500 * time.Millisecond
	rp := newReplica(t, r)
	k := rp.key("k", Limit{Interval: time.Hour, Requests: 3}, p)
	if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
		t.Fatalf("with Redis up: %+v (fallback %v)", ref, res.Fallback())
	}
	// CLIENT PAUSE holds every other client's commands on the server, the
	// PING after the admission too: it answers once the pause is over.
	if reply, err := r.Do("CLIENT", "PAUSE", "1000", "ALL"); err != nil || reply != "+OK" {
		t.Fatal(reply, err)
	}
	res, ref := k.Admit(0)
	if ref.Refused() || !res.Fallback() {
		t.Fatalf("with Redis paused: %+v (fallback %v)", ref, res.Fallback())
	}
	if reply, err := r.Do("PING"); err != nil || reply != "+PONG" {
		t.Fatal(reply, err)
	}
	// The admission cannot know whether its script ran (a busy Redis runs
	// it late; a paused one drops it with the closed connection): it is
	// taken not to have run, and the request is owed. Here it never ran,
	// so the key is charged once: by the settler, after the next admission
	// found Redis back.
	rp.clk.Advance(retryAfter)
	if res, ref := k.Admit(0); ref.Refused() || res.Fallback() {
		t.Fatalf("with Redis back: %+v (fallback %v)", ref, res.Fallback())
	}
	waitLevel(t, r, p.KeyPrefix+"k", "r", 0)
}

// TestRedisReplyError: a key Redis refuses (a wrong type at its name)
// fails alone; the other keys keep using Redis.
func TestRedisReplyError(t *testing.T) {
	r := redistest.Start(t)
	rp := newReplica(t, r)
	l, p := Limit{Interval: time.Hour, Requests: 3}, policy(r, true)
	bad, good := rp.key("bad", l, p), rp.key("good", l, p)
	if _, err := r.Do("SET", p.KeyPrefix+"bad", "a string, not a hash"); err != nil {
		t.Fatal(err)
	}
	if _, ref := bad.Admit(0); !ref.Unavailable {
		t.Fatalf("key with a wrong type on Redis: %+v, want unavailable", ref)
	}
	for i := range 3 {
		if res, ref := good.Admit(0); ref.Refused() || res.Fallback() {
			t.Fatalf("other key, admission %d after the refusal: %+v (fallback %v)", i, ref, res.Fallback())
		}
	}
	waitLevel(t, r, p.KeyPrefix+"good", "r", 0)
}

// TestRedisChargesDebtFirst: an admission on a Redis that answers charges
// first what the key owes (its script, before the check), also when it
// is refused: the settler is not needed for a key that is admitted again.
func TestRedisChargesDebtFirst(t *testing.T) {
	r := redistest.Start(t)
	clk := &clock.Fake{}
	st := NewRedis(Conn{Address: r.Addr}, nowOf(clk), zerolog.Nop())
	t.Cleanup(func() { st.Start(); st.Stop() }) // no settler until then: only admissions pay
	p := policy(r, false)
	l := Limit{Interval: time.Hour, Requests: 5}
	k := st.Key("k", l, NewBucket(l, nowOf(clk)), p)
	steps := []struct {
		owed    float64
		refused bool
		left    float64
	}{
		{0, false, 4},
		{2, false, 1},  // 4 − 2 owed − 1
		{3, true, -2},  // 1 − 3 owed: refused, the debt charged
		{0, true, -2},  // nothing owed: nothing changes
		{-4, false, 1}, // owed back (settled requests): −2 + 4 − 1
	}
	for i, s := range steps {
		k.addOwed(debt{req: s.owed})
		if _, ref := k.Admit(0); ref.Refused() != s.refused {
			t.Fatalf("step %d: %+v, want refused %v", i, ref, s.refused)
		}
		got, err := r.Get("HGET", p.KeyPrefix+"k", "r")
		if v, perr := strconv.ParseFloat(got, 64); err != nil || perr != nil || v < s.left || v > s.left+0.01 {
			t.Fatalf("step %d: r = %q (%v), want %v (and the refill since)", i, got, err, s.left)
		}
	}
}
