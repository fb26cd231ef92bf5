package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/proxy/engines"
)

// Engine load from the engine's own /metrics, for engines that say nothing
// per request: each record gets the engine's waiting and running counts as
// last scraped before the request was routed (Config.ScrapeEngineMetrics).
// A queue can then be seen where it cannot be measured. The same scrape
// reads what the engine counts of its work for clients that had left,
// handed to Config.EngineWaste.

// EngineWaste receives, at every scrape of an upstream's /metrics, what
// its engine counts of its work for clients that had left: the tokens it
// generated after the client left and the requests it aborted, cumulative,
// each -1 when the engine does not report it.
type EngineWaste interface {
	EngineWaste(upstream string, tokensAfterClientLeft, abortedRequests int64)
}

// engineLoad is an upstream's last scraped load; negative until known.
type engineLoad struct {
	waiting, running atomic.Int64
}

func (l *engineLoad) init() {
	l.waiting.Store(-1)
	l.running.Store(-1)
}

// scrapeLoad polls baseURL/metrics every interval until ctx ends, giving
// waste (when set) the engine's counts under the upstream's name.
func (l *engineLoad) scrapeLoad(ctx context.Context, baseURL, name string, interval time.Duration, waste EngineWaste) {
	client := &http.Client{Timeout: interval, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if em, ok := scrapeOnce(ctx, client, baseURL+"/metrics"); ok {
			if em.Load {
				l.waiting.Store(em.Waiting)
				l.running.Store(em.Running)
			}
			if waste != nil {
				waste.EngineWaste(name, em.TokensAfterClientLeft, em.AbortedRequests)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeOnce reads the engine's /metrics; ok is false when it could not.
func scrapeOnce(ctx context.Context, client *http.Client, url string) (em engines.EngineMetrics, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return em, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return em, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return em, false
	}
	return engines.ParseMetrics(io.LimitReader(resp.Body, 4<<20)), true
}
