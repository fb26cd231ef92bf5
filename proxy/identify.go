package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/proxy/engines"
)

// EngineAuto asks the proxy to identify each upstream's engine from what it
// serves (its headers and /v1/models): as soon as the configuration naming
// it is in effect, again when its health probe first passes, retrying until
// the upstream answers; and, until then, from a response that names its
// engine (engines.GenericReader).
const EngineAuto = "auto"

// engineKind is an upstream's engine kind, set once known.
type engineKind struct {
	v atomic.Pointer[string]
	// wake, while identification waits to retry, lets a request for the
	// upstream, or a passing health probe, cut the wait short: a good sign
	// it is up.
	wake atomic.Pointer[chan struct{}]
	// running: an identification of the upstream is under way.
	running atomic.Bool
}

func (k *engineKind) get() string {
	if p := k.v.Load(); p != nil {
		return *p
	}
	k.wakeUp()
	return engines.KindGeneric // until identified: the OpenAI fields, and what a response says of its engine
}

// wakeUp cuts a waiting identification's wait short; it reports whether
// one was waiting.
func (k *engineKind) wakeUp() bool {
	if w := k.wake.Load(); w != nil {
		select {
		case *w <- struct{}{}:
		default:
		}
		return true
	}
	return false
}

func (k *engineKind) set(kind string) { k.v.Store(&kind) }

// identified records what /v1/models said: a kind it named replaces any,
// generic only an unknown one (a response may have named the engine
// meanwhile: learn).
func (k *engineKind) identified(kind string) {
	if kind != engines.KindGeneric {
		k.set(kind)
		return
	}
	k.v.CompareAndSwap(nil, &kind)
}

// learn settles the kind from a response that named its engine, when the
// upstream is not identified or was identified as generic; it reports
// whether it changed the kind. A kind /v1/models named is never replaced.
func (k *engineKind) learn(kind string) bool {
	for {
		p := k.v.Load()
		if p != nil && *p != engines.KindGeneric {
			return false
		}
		if k.v.CompareAndSwap(p, &kind) {
			return true
		}
	}
}

// retrySchedule is how identification retries an upstream that did not
// answer: after first, doubling up to max, or sooner when a request comes
// for the upstream, but never within min of the last attempt.
type retrySchedule struct{ min, first, max time.Duration }

var detectRetry = retrySchedule{min: 250 * time.Millisecond, first: time.Second, max: 30 * time.Second}

// detectEngine identifies the engine behind u (see identify) in the
// background, so no request waits for it, until it is known or the proxy
// stops; it does nothing while an identification of u runs already.
func (p *Proxy) detectEngine(u *upstream, baseURL string) {
	if !u.kind.running.CompareAndSwap(false, true) {
		return
	}
	p.goBackground(func() {
		defer u.kind.running.Store(false)
		p.identify(p.stopCtx, u, baseURL, detectRetry)
	})
}

// upstreamUp is told of a gateway upstream whose health probe passed, the
// first time or after failures (gateway.WatchProbes): with --engine auto,
// an engine not identified yet, or identified only as generic (an answer
// before the engine behind it was up), is identified now.
func (p *Proxy) upstreamUp(gu *gateway.Upstream) {
	v, ok := p.clients.Load(gu.URL)
	if !ok || p.cfg.Engine != EngineAuto {
		return
	}
	u := v.(*upstream)
	if k := u.kind.v.Load(); k != nil && *k != engines.KindGeneric {
		return
	}
	if !u.kind.wakeUp() {
		p.detectEngine(u, gu.URL)
	}
}

// learnEngine settles u's kind from a response that named its engine
// (engines.Report.Recognised), with --engine auto.
func (p *Proxy) learnEngine(u *upstream, kind string) {
	if kind == "" || p.cfg.Engine != EngineAuto || !u.kind.learn(kind) {
		return
	}
	p.log.Info().Str("upstream", u.Name).Str("engine", kind).Msg("engine recognised from its response")
}

// identify asks the upstream what it is (GET /v1/models, bounded) and
// records the kind. An upstream it cannot reach, or that answers 5xx without
// saying what it is (still loading, or a balancer with nothing behind it),
// is not settled as generic: identify logs that, once as a warning (and
// again only if the problem changes; each retry at debug level), and tries
// again on retry's schedule until it gets an answer or ctx ends. An
// upstream that answers but cannot be told apart is generic.
func (p *Proxy) identify(ctx context.Context, u *upstream, baseURL string, retry retrySchedule) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	wake := make(chan struct{}, 1)
	u.kind.wake.Store(&wake)
	defer u.kind.wake.Store(nil)
	wait, lastProblem := retry.first, ""
	for attempt := 1; ; attempt++ {
		kind, problem, err := askEngine(ctx, client, baseURL)
		if ctx.Err() != nil {
			return // stopped
		}
		if problem == "" {
			u.kind.identified(kind)
			e := p.log.Info().Str("upstream", u.Name).Str("engine", kind)
			if attempt > 1 {
				e = e.Int("attempts", attempt)
			}
			e.Msg("engine identified")
			return
		}
		level := zerolog.DebugLevel
		if problem != lastProblem {
			level = zerolog.WarnLevel
		}
		lastProblem = problem
		p.log.WithLevel(level).Str("upstream", u.Name).Err(err).Int("attempt", attempt).
			Str("retry_in", wait.String()).Msg("engine not identified: " + problem + ", will retry")
		if !clock.Sleep(ctx, p.cfg.Clock, retry.min, nil) || !clock.Sleep(ctx, p.cfg.Clock, wait-retry.min, wake) {
			return
		}
		wait = min(2*wait, retry.max)
	}
}

// askEngine makes one identification attempt: the kind, or the problem
// ("upstream unreachable", "upstream not ready") that calls for a retry,
// with its error.
func askEngine(ctx context.Context, client *http.Client, baseURL string) (kind, problem string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/models", nil)
	if err != nil {
		return engines.KindGeneric, "", nil // a URL NewUpstream took; cannot happen
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "upstream unreachable", err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	h := func(name string) []byte { return []byte(resp.Header.Get(name)) }
	kind = engines.Detect(h, body, []byte(resp.Header.Get("Server")))
	if kind == engines.KindGeneric && resp.StatusCode >= 500 {
		return "", "upstream not ready", fmt.Errorf("GET %s/v1/models: status %d", baseURL, resp.StatusCode)
	}
	return kind, "", nil
}
