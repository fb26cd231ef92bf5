// Package quota holds the gateway's per-key quota backends: token buckets
// in this process (Bucket) and the same buckets shared on Redis by every
// replica (Redis, Shared). The gateway holds one Limiter per key with a
// quota, admits each request against it and calls the Reservation's Settle
// or Cancel when the request ends. It knows no configuration file and no
// HTTP: a refusal is a Refusal, which the gateway answers.
//
// Every clock here is the gateway's monotonic clock in nanoseconds.
package quota

import (
	"math"
	"sync"
	"time"
)

// Quotas are token buckets, one pair per key: a request bucket holding up to
// `requests` and a token bucket holding up to `tokens`, each refilled
// continuously at capacity/interval. We chose buckets over a sliding window
// because their state is four numbers per key (no per-request history),
// Retry-After is exact arithmetic (the deficit over the refill rate), and a
// reservation can be reconciled later by adding or removing tokens. A key
// may burst its whole interval's quota at once, then gets capacity/interval
// per unit of time: the usual reading of "N per interval".
//
// Admission charges one request and the estimated tokens (prompt estimate +
// the max_tokens reservation) only when both buckets can pay; Settle then
// adds or refunds the difference to the real usage. Settling more than was
// reserved can leave the token bucket in debt (negative), which delays the
// key's next request until it refills: usage is never forgiven. A request
// estimated at more than the whole bucket is charged as a full bucket at
// admission (so it can ever be admitted) and its real cost at Settle.

// Limit is one key's quota: Requests requests and Tokens tokens per
// Interval. Zero Requests or Tokens means that dimension is unlimited; at
// least one is set and Interval is positive.
type Limit struct {
	Interval time.Duration
	Requests int
	Tokens   int
}

// Limiter admits one key's requests against its quota, on one backend.
type Limiter interface {
	// Admit charges one request and est tokens, or refuses without
	// charging anything.
	Admit(est int) (Reservation, Refusal)
}

// Refusal says why an admission was refused; the zero Refusal admits.
type Refusal struct {
	// Over is the bucket that cannot pay, "requests" or "tokens"; Wait is
	// how long until both buckets can.
	Over string
	Wait time.Duration
	// Unavailable: the shared backend could not answer and its on_failure
	// is closed.
	Unavailable bool
}

// Refused reports whether r refuses the admission.
func (r Refusal) Refused() bool { return r.Over != "" || r.Unavailable }

// waitNs is a wait computed in nanoseconds, rounded up (a client told to
// retry in 20s must not be refused at 19.9s), at most 2^62 ns (146 years).
func waitNs(ns float64) time.Duration {
	return time.Duration(min(math.Ceil(ns), 1<<62))
}

// Bucket is one key's pair of buckets in this process. It survives
// reloads (Configure). Safe for concurrent use.
type Bucket struct {
	now      func() int64
	mu       sync.Mutex
	reqCap   float64 // 0: unlimited
	tokCap   float64 // 0: unlimited
	reqRate  float64 // per nanosecond
	tokRate  float64 // per nanosecond
	req, tok float64 // current levels
	last     int64   // ns of the last refill
}

// NewBucket returns full buckets for l on the clock now.
func NewBucket(l Limit, now func() int64) *Bucket {
	b := &Bucket{now: now, last: now()}
	b.Configure(l)
	b.req, b.tok = b.reqCap, b.tokCap
	return b
}

// Configure applies a (reloaded) limit, keeping the levels it can.
func (b *Bucket) Configure(l Limit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(b.now())
	iv := float64(l.Interval)
	b.reqCap, b.tokCap = float64(l.Requests), float64(l.Tokens)
	b.reqRate, b.tokRate = b.reqCap/iv, b.tokCap/iv
	b.req, b.tok = min(b.req, b.reqCap), min(b.tok, b.tokCap)
}

func (b *Bucket) refill(now int64) {
	if dt := float64(now - b.last); dt > 0 {
		b.req = min(b.reqCap, b.req+dt*b.reqRate)
		b.tok = min(b.tokCap, b.tok+dt*b.tokRate)
		b.last = now
	}
}

// Admit charges one request and est tokens when both buckets can pay.
func (b *Bucket) Admit(est int) (Reservation, Refusal) {
	est = max(est, 0)
	b.mu.Lock()
	b.refill(b.now())
	tokCost := 0.0
	if b.tokCap > 0 {
		tokCost = min(float64(est), b.tokCap)
	}
	var wait float64 // ns until both buckets can pay
	var over string
	if b.reqCap > 0 && b.req < 1 {
		wait, over = (1-b.req)/b.reqRate, "requests"
	}
	if b.tokCap > 0 && b.tok < tokCost {
		if w := (tokCost - b.tok) / b.tokRate; w > wait {
			wait, over = w, "tokens"
		}
	}
	if over != "" {
		b.mu.Unlock()
		return Reservation{}, Refusal{Over: over, Wait: waitNs(wait)}
	}
	if b.reqCap > 0 {
		b.req--
	}
	b.tok -= tokCost
	b.mu.Unlock()
	return Reservation{b: b, tokens: tokCost}, Refusal{}
}

// charge takes one request and tokCost tokens whatever the levels: what
// the shared backend admitted, counted against this replica's buckets too
// (they decide when the backend cannot).
func (b *Bucket) charge(tokCost float64) {
	b.mu.Lock()
	b.refill(b.now())
	if b.reqCap > 0 {
		b.req--
	}
	b.tok -= tokCost
	b.mu.Unlock()
}

// Reservation is what one request was charged at admission. Call exactly one
// of Settle or Cancel when the request ends. The zero Reservation (no key,
// or a key without quota) does nothing.
type Reservation struct {
	b      *Bucket
	tokens float64
	sk     *Shared // the shared buckets charged too (redis backend)
	// fallback: the shared backend could not answer and b decided; sk is
	// owed the charge (and what the request settles).
	fallback bool
}

// Fallback reports that the shared quota backend could not answer and this
// replica's own buckets decided (on_failure open). It is also set on the
// Reservation returned with a refusal.
func (r Reservation) Fallback() bool { return r.fallback }

// Settle reconciles the reservation with the tokens the request really used
// (prompt + completion, from the upstream's usage, or the gateway's estimate
// when the upstream reported none). The request stays counted. It never
// waits: a shared backend's adjustment is queued and sent by its settler.
func (r Reservation) Settle(actual int) {
	if r.b == nil {
		return
	}
	b := r.b
	back := r.tokens - float64(max(actual, 0))
	b.mu.Lock()
	if b.tokCap > 0 {
		b.tok = min(b.tokCap, b.tok+back)
	}
	b.mu.Unlock()
	if r.sk != nil && r.sk.tokCap > 0 && back != 0 {
		r.giveBack(0, back)
	}
}

// Cancel gives back the request and its tokens: for a request the gateway
// itself refused after admission (no healthy upstream, queue full or
// timed out), which the key should not pay for.
func (r Reservation) Cancel() {
	if r.b == nil {
		return
	}
	b := r.b
	b.mu.Lock()
	if b.reqCap > 0 {
		b.req = min(b.reqCap, b.req+1)
	}
	b.tok = min(b.tokCap, b.tok+r.tokens)
	b.mu.Unlock()
	if r.sk != nil {
		r.giveBack(1, r.tokens)
	}
}

// giveBack gives req requests and tok tokens back to the shared buckets:
// through the settler's queue, or, when the admission's own charge is
// owed (fallback), off that debt.
func (r Reservation) giveBack(req, tok float64) {
	if r.fallback {
		r.sk.owe(debt{req: -req, tok: -tok})
	} else {
		r.sk.adjust(req, tok)
	}
}
