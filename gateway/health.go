package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
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

// checker is one pool's active health check: a goroutine probing every
// upstream of the pool each interval, all at once, each within the timeout.
// A failed probe marks the upstream unhealthy, a passing one healthy: the
// verdict follows the last probe (no thresholds; passive ejection handles
// flapping under load). A verdict that takes the upstream out of rotation
// or brings it back is logged, once (healthlog.go).
type checker struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startChecker(p *Pool, probe ProbeFunc) *checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &checker{cancel: cancel, done: make(chan struct{})}
	go c.run(ctx, p, probe)
	return c
}

func (c *checker) run(ctx context.Context, p *Pool, probe ProbeFunc) {
	defer close(c.done)
	t := time.NewTicker(p.health.Interval)
	defer t.Stop()
	for {
		probeAll(ctx, p, probe)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func probeAll(ctx context.Context, p *Pool, probe ProbeFunc) {
	var wg sync.WaitGroup
	for _, u := range p.Upstreams {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, p.health.Timeout)
			err := probe(pctx, u.URL+p.health.Path)
			cancel()
			if ctx.Err() != nil {
				return // stopped: no verdict
			}
			u.setVerdict(p.Name, err)
		})
	}
	wg.Wait()
}

// stop ends the checker and waits for its goroutines.
func (c *checker) stop() {
	c.cancel()
	<-c.done
}
