package gateway

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
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
type bucket struct {
	mu       sync.Mutex
	reqCap   float64 // 0: unlimited
	tokCap   float64 // 0: unlimited
	reqRate  float64 // per nanosecond
	tokRate  float64 // per nanosecond
	req, tok float64 // current levels
	last     int64   // ns of the last refill
}

func newBucket(q Quota, now int64) *bucket {
	b := &bucket{last: now}
	b.configure(q, now)
	b.req, b.tok = b.reqCap, b.tokCap
	return b
}

// configure applies a (reloaded) quota, keeping the levels it can.
func (b *bucket) configure(q Quota, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	iv := float64(q.Interval)
	b.reqCap, b.tokCap = float64(q.Requests), float64(q.Tokens)
	b.reqRate, b.tokRate = b.reqCap/iv, b.tokCap/iv
	b.req, b.tok = min(b.req, b.reqCap), min(b.tok, b.tokCap)
}

func (b *bucket) refill(now int64) {
	if dt := float64(now - b.last); dt > 0 {
		b.req = min(b.reqCap, b.req+dt*b.reqRate)
		b.tok = min(b.tokCap, b.tok+dt*b.tokRate)
		b.last = now
	}
}

// Reservation is what one request was charged at admission. Call exactly one
// of Settle or Cancel when the request ends. The zero Reservation (no key,
// or a key without quota) does nothing.
type Reservation struct {
	b      *bucket
	tokens float64
	sk     *sharedKey // the shared buckets charged too (redis backend)
	// fallback: the shared backend could not answer and b decided.
	fallback bool
}

// Fallback reports that the shared quota backend could not answer and this
// replica's own buckets decided (on_failure open). It is also set on the
// Reservation returned with a rejection.
func (r Reservation) Fallback() bool { return r.fallback }

// HasQuota reports that Admit checks k against a quota (a nil k has none).
func (k *Key) HasQuota() bool { return k != nil && k.quota != nil }

// Admit charges key one request and est tokens, or returns a 429 Rejection
// (policy_block / quota_exceeded) with a Retry-After in seconds. A nil key
// (auth passthrough or none) or a key without quota is always admitted.
// With the redis backend it waits for Redis up to the backend's timeout;
// when Redis fails, on_failure decides: this replica's buckets (open) or a
// 503 Rejection (closed, worker_failure / quota_unavailable).
func (s *Snapshot) Admit(k *Key, est int) (Reservation, *Rejection) {
	if k == nil || k.quota == nil {
		return Reservation{}, nil
	}
	if k.shared != nil {
		return k.shared.admit(k.quota, max(est, 0))
	}
	return k.quota.admit(s.g.now(), max(est, 0))
}

func (b *bucket) admit(now int64, est int) (Reservation, *Rejection) {
	b.mu.Lock()
	b.refill(now)
	tokCost := 0.0
	if b.tokCap > 0 {
		tokCost = min(float64(est), b.tokCap)
	}
	var wait float64 // ns until both buckets can pay
	var which string
	if b.reqCap > 0 && b.req < 1 {
		wait, which = (1-b.req)/b.reqRate, "requests"
	}
	if b.tokCap > 0 && b.tok < tokCost {
		if w := (tokCost - b.tok) / b.tokRate; w > wait {
			wait, which = w, "tokens"
		}
	}
	if which != "" {
		b.mu.Unlock()
		return Reservation{}, quotaRejection(which, wait)
	}
	if b.reqCap > 0 {
		b.req--
	}
	b.tok -= tokCost
	b.mu.Unlock()
	return Reservation{b: b, tokens: tokCost}, nil
}

// charge takes one request and tokCost tokens whatever the levels: what
// the shared backend admitted, counted against this replica's buckets too
// (they decide when the backend cannot).
func (b *bucket) charge(now int64, tokCost float64) {
	b.mu.Lock()
	b.refill(now)
	if b.reqCap > 0 {
		b.req--
	}
	b.tok -= tokCost
	b.mu.Unlock()
}

// Settle reconciles the reservation with the tokens the request really used
// (prompt + completion, from the upstream's usage, or the gateway's estimate
// when the upstream reported none). The request stays counted. It never
// waits: a shared backend's adjustment is queued and sent by Start's
// settler.
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
		r.sk.adjust(0, back)
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
		r.sk.adjust(1, r.tokens)
	}
}

func quotaRejection(which string, waitNs float64) *Rejection {
	// At least 1 (0 would invite an immediate retry), at most a day.
	secs := int(min(max(math.Ceil(waitNs/float64(time.Second)), 1), 86400))
	return &Rejection{
		Status: 429, RetryAfter: secs, Type: which, Code: "rate_limit_exceeded",
		Message: "Rate limit reached for " + which + " on this API key; retry in " + strconv.Itoa(secs) + "s.",
		Reason:  endreason.PolicyBlock, Detail: endreason.DetailQuotaExceeded,
	}
}
