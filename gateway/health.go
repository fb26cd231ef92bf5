package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/internal/clock"
)

// ProbeFunc probes one upstream: GET url (the upstream's base URL and the
// pool's health path) and returns nil when it is healthy. It must return
// when ctx ends (the probe timeout, or Stop).
type ProbeFunc func(ctx context.Context, url string) error

// HTTPProbe is the default ProbeFunc: a GET that must answer 2xx. It uses no
// keep-alive connections, so a stopped gateway leaves nothing behind.
func HTTPProbe(client *http.Client) ProbeFunc {
	return func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("health check %s: status %d", url, resp.StatusCode)
		}
		return nil
	}
}

func defaultProbe() ProbeFunc {
	return HTTPProbe(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
}

// firstRetry is the wait before probing an upstream again after its probe
// failed; each further failure doubles it, up to the pool's interval.
const firstRetry = 100 * time.Millisecond

// checker is one pool's active health check: a goroutine per upstream,
// each probing its upstream within the timeout, every interval while the
// probes pass and sooner while they fail (retryAfter), so an upstream that
// comes up after the proxy, or back after a failure, is in rotation again
// within a fraction of the interval. A failed probe marks the upstream
// unhealthy, a passing one healthy and not ejected: the verdict follows
// the last probe (no thresholds; passive ejection handles flapping under
// load between probes). A verdict
// that takes the upstream out of rotation or brings it back is logged,
// once (healthlog.go).
type checker struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (g *Gateway) startChecker(p *Pool) *checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &checker{cancel: cancel}
	for _, u := range p.Upstreams {
		c.wg.Go(func() { g.watchUpstream(ctx, p, u) })
	}
	return c
}

// watchUpstream probes u until ctx ends.
func (g *Gateway) watchUpstream(ctx context.Context, p *Pool, u *Upstream) {
	var retry time.Duration // the wait after the last failure; 0 after a pass
	for {
		err := probeOnce(ctx, p, u, g.opts.Probe)
		if ctx.Err() != nil {
			return
		}
		wait := p.health.Interval
		if err != nil {
			retry = retryAfter(retry, p.health.Interval)
			wait = retry
		} else {
			retry = 0
		}
		u.nextProbe.Store(g.now() + int64(wait))
		if !clock.Sleep(ctx, g.opts.Clock, wait, nil) {
			return
		}
	}
}

// retryAfter is the wait after a failed probe, given last, the wait after
// the probe before it (0 when that one passed): firstRetry, then doubling,
// never over interval.
func retryAfter(last, interval time.Duration) time.Duration {
	if last == 0 {
		return min(firstRetry, interval)
	}
	return min(2*last, interval)
}

// probeOnce probes u within the pool's timeout and records the verdict,
// unless ctx ended first (a stopped checker gives no verdict).
func probeOnce(ctx context.Context, p *Pool, u *Upstream, probe ProbeFunc) error {
	pctx, cancel := context.WithTimeout(ctx, p.health.Timeout)
	err := probe(pctx, u.URL+p.health.Path)
	cancel()
	if ctx.Err() == nil {
		u.setVerdict(p.Name, err)
	}
	return err
}

// stop ends the checker and waits for its goroutines.
func (c *checker) stop() {
	c.cancel()
	c.wg.Wait()
}
