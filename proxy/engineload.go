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
// A queue can then be seen where it cannot be measured.

// engineLoad is an upstream's last scraped load; negative until known.
type engineLoad struct {
	waiting, running atomic.Int64
}

func (l *engineLoad) init() {
	l.waiting.Store(-1)
	l.running.Store(-1)
}

// scrapeLoad polls baseURL/metrics every interval until ctx ends.
func (l *engineLoad) scrapeLoad(ctx context.Context, baseURL string, interval time.Duration) {
	client := &http.Client{Timeout: interval, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if waiting, running, ok := scrapeOnce(ctx, client, baseURL+"/metrics"); ok {
			l.waiting.Store(waiting)
			l.running.Store(running)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeOnce reads the engine's load gauges from its /metrics.
func scrapeOnce(ctx context.Context, client *http.Client, url string) (waiting, running int64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, false
	}
	return engines.ParseLoad(io.LimitReader(resp.Body, 4<<20))
}
