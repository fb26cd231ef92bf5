package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy/engines"
)

// Engine load from the engine's own /metrics, for engines that say nothing
// per request, and for least_load routing: each scrape hands the engine's
// waiting and running counts and KV-cache usage to the gateway's upstream
// (Upstream.SetEngineLoad), whose Pick compares them and whose load each
// record carries as it was when the request was routed. A queue can then
// be seen where it cannot be measured. Upstreams are scraped when
// Config.ScrapeEngineMetrics is set (at that interval, each from its first
// request), and those of least_load pools always, from the moment the
// configuration that names them is in effect (at ScrapeEngineMetrics, or
// DefaultLeastLoadScrape when it is not set). The same scrape reads what
// the engine counts of its work for clients that had left, handed to
// Config.EngineWaste.

// DefaultLeastLoadScrape is how often the engines of least_load pools are
// scraped without --scrape-engine-metrics: a queue that builds in a
// fraction of a second shows within one, and a scrape over a kept-alive
// connection costs the engine about a millisecond. Between scrapes Pick
// counts this replica's own requests (gateway.Upstream.loadKey).
const DefaultLeastLoadScrape = 100 * time.Millisecond

// scrapeMisses is how many scrapes in a row must fail before an
// upstream's load is unknown.
const scrapeMisses = 3

// scrapeTimeout is the least time a scrape may take.
const scrapeTimeout = time.Second

// EngineWaste receives, at every scrape of an upstream's /metrics, what
// its engine counts of its work for clients that had left: the tokens it
// generated after the client left and the requests it aborted, cumulative,
// each -1 when the engine does not report it.
type EngineWaste interface {
	EngineWaste(upstream string, tokensAfterClientLeft, abortedRequests int64)
}

// engineLoad is an upstream's scraping: started once.
type engineLoad struct {
	started atomic.Bool
}

// upstreamsInEffect readies the upstreams of s before their first request
// (Watch calls it with every configuration put in effect): each one's
// engine identified (--engine auto, client), and the engines of least_load
// pools scraped, so their loads are known.
func (p *Proxy) upstreamsInEffect(s *gateway.Snapshot) {
	for _, pool := range s.Pools() {
		for _, u := range pool.Upstreams {
			c, err := p.client(u)
			if err == nil && pool.Policy == gateway.PolicyLeastLoad {
				p.startScrape(c, u.URL)
			}
		}
	}
}

// startScrape starts scraping c's engine at baseURL unless it runs already.
func (p *Proxy) startScrape(c *upstream, baseURL string) {
	if !c.load.started.CompareAndSwap(false, true) {
		return
	}
	interval := p.cfg.ScrapeEngineMetrics
	if interval <= 0 {
		interval = DefaultLeastLoadScrape
	}
	p.goBackground(func() { p.scrapeLoad(c, baseURL, interval) })
}

// scrapeLoad polls baseURL/metrics every interval until the proxy stops.
// Each scrape goes to the gateway upstream the configuration in effect has
// for baseURL (a reload may have replaced it); scrapeMisses failed ones in
// a row, or with no load gauge, make its load unknown (one slow answer
// does not turn a least_load pool to least_request and back).
func (p *Proxy) scrapeLoad(c *upstream, baseURL string, interval time.Duration) {
	transport := &http.Transport{MaxIdleConnsPerHost: 1}
	defer transport.CloseIdleConnections()
	// A busy engine may answer its /metrics slowly: a late answer is
	// still the freshest there is.
	client := &http.Client{Timeout: max(interval, scrapeTimeout), Transport: transport}
	t := time.NewTicker(interval)
	defer t.Stop()
	misses := 0
	for {
		u := p.currentUpstream(baseURL)
		var mark int64
		if u != nil {
			mark = u.ScrapeMark()
		}
		em, ok := scrapeOnce(p.stopCtx, client, baseURL+"/metrics")
		switch {
		case u == nil:
		case ok && em.Load:
			misses = 0
			u.SetEngineLoad(gateway.EngineLoad{Waiting: em.Waiting, Running: em.Running, KVCacheUsage: em.KVCacheUsage}, mark)
		default:
			if misses++; misses >= scrapeMisses {
				u.ClearEngineLoad()
			}
		}
		if ok && p.cfg.EngineWaste != nil {
			p.cfg.EngineWaste.EngineWaste(c.Name, em.TokensAfterClientLeft, em.AbortedRequests)
		}
		select {
		case <-p.stopCtx.Done():
			return
		case <-t.C:
		}
	}
}

// currentUpstream is the gateway upstream at baseURL in the configuration
// in effect; nil when a reload dropped it.
func (p *Proxy) currentUpstream(baseURL string) *gateway.Upstream {
	for _, pool := range p.gw.Snapshot().Pools() {
		for _, u := range pool.Upstreams {
			if u.URL == baseURL {
				return u
			}
		}
	}
	return nil
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
	em = engines.ParseMetrics(io.LimitReader(resp.Body, 4<<20))
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept
	return em, true
}
