package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/proxy/engines"
)

// Engine load from the engine's own /metrics, for engines that say nothing
// per request, and for least_load routing: each scrape hands the engine's
// waiting and running counts and KV-cache usage to the gateway's upstream
// (Upstream.SetEngineLoad), whose Pick compares them and whose load each
// record carries as it was when the request was routed. A queue can then
// be seen where it cannot be measured. The same scrape reads what the
// engine counts of its work for clients that had left, handed to
// Config.EngineWaste. Every upstream of the configuration in effect is
// scraped from the moment that configuration is (scrapePlan says how
// often), until a configuration drops it.

// DefaultEngineScrape is how often an upstream's /metrics is scraped when
// Config.ScrapeEngineMetrics is zero. The engines' counts of work for
// clients that had left are cumulative counters: a scrape every 15 s (the
// Prometheus default interval, at which the dashboard's panels are read)
// loses none of them and shows a change within one dashboard step, while
// costing an engine four requests a minute. The load a record carries is
// then up to 15 s old: a least_load or least_ttft pool, which routes on
// it, is scraped at DefaultLeastLoadScrape instead.
const DefaultEngineScrape = 15 * time.Second

// DefaultLeastLoadScrape is how often the engines of least_load and
// least_ttft pools are scraped when Config.ScrapeEngineMetrics is not positive: a queue that
// builds in a fraction of a second shows within one, and a scrape over a
// kept-alive connection costs the engine about a millisecond. Between
// scrapes Pick counts this replica's own requests (gateway.Upstream.loadKey).
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

// engineLoad is an upstream's scraping: at most one loop at a time, which
// ends when the configuration in effect no longer scrapes the upstream.
type engineLoad struct {
	mu      sync.Mutex
	running bool
}

// upstreamsInEffect readies the upstreams of s before their first request
// (Watch calls it with every configuration put in effect): each one's
// engine identified (--engine auto, client) and scraped, so its load is
// known.
func (p *Proxy) upstreamsInEffect(s *gateway.Snapshot) {
	for _, pool := range s.Pools() {
		for _, u := range pool.Upstreams {
			if c, err := p.client(u); err == nil {
				p.startScrape(c, u.URL) // again: a reload may scrape one it did not
			}
		}
	}
}

// startScrape starts scraping c's engine at baseURL unless it runs already
// or the configuration in effect does not scrape it.
func (p *Proxy) startScrape(c *upstream, baseURL string) {
	c.load.mu.Lock()
	defer c.load.mu.Unlock()
	if c.load.running {
		return
	}
	if _, interval := p.scrapePlan(baseURL); interval == 0 {
		return
	}
	c.load.running = true
	p.goBackground(func() { p.scrapeLoad(c, baseURL) })
}

// scrapePlan is the gateway upstream the configuration in effect has for
// baseURL (nil when a reload dropped it; it may have replaced it) and how
// often it is scraped: Config.ScrapeEngineMetrics when positive; else
// DefaultLeastLoadScrape in a pool that routes on the engines' load
// (least_load, least_ttft); else DefaultEngineScrape,
// or 0 (not scraped) when ScrapeEngineMetrics is negative or the
// configuration has no such upstream.
func (p *Proxy) scrapePlan(baseURL string) (*gateway.Upstream, time.Duration) {
	var found *gateway.Upstream
	onLoad := false
	for _, pool := range p.gw.Snapshot().Pools() {
		for _, u := range pool.Upstreams {
			if u.URL == baseURL {
				found = u
				onLoad = onLoad || pool.Policy == gateway.PolicyLeastLoad || pool.Policy == gateway.PolicyLeastTTFT
			}
		}
	}
	set := p.cfg.ScrapeEngineMetrics
	switch {
	case found == nil:
		return nil, 0
	case set > 0:
		return found, set
	case onLoad:
		return found, DefaultLeastLoadScrape
	case set == 0:
		return found, DefaultEngineScrape
	}
	return found, 0
}

// scrapeLoad polls baseURL/metrics at scrapePlan's interval, on
// Config.Clock, until the proxy stops or the configuration in effect no
// longer scrapes it. Each scrape goes to the gateway upstream the
// configuration has for baseURL; scrapeMisses failed ones in a row, or
// with no load gauge, make its load unknown (one slow answer does not turn
// a least_load pool to least_request and back). An upstream whose /metrics
// cannot be read (unreachable, not found, not Prometheus text) is logged
// once, as a warning, and again only when the problem changes; its
// recovery once, as info.
func (p *Proxy) scrapeLoad(c *upstream, baseURL string) {
	transport := &http.Transport{MaxIdleConnsPerHost: 1}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	misses, lastProblem := 0, ""
	for {
		c.load.mu.Lock()
		u, interval := p.scrapePlan(baseURL)
		if interval == 0 {
			c.load.running = false // under the lock: a startScrape after it starts another loop
		}
		c.load.mu.Unlock()
		if interval == 0 {
			return
		}
		mark := u.ScrapeMark()
		// A busy engine may answer its /metrics slowly: a late answer is
		// still the freshest there is.
		ctx, cancel := context.WithTimeout(p.stopCtx, max(interval, scrapeTimeout))
		em, problem, err := scrapeOnce(ctx, client, baseURL+"/metrics")
		cancel()
		if p.stopCtx.Err() != nil {
			return
		}
		switch {
		case problem == "" && em.Load:
			misses = 0
			u.SetEngineLoad(gateway.EngineLoad{Waiting: em.Waiting, Running: em.Running, KVCacheUsage: em.KVCacheUsage, CacheTokens: em.CacheTokens}, mark)
		default:
			if problem == "" {
				u.SetCacheTokens(em.CacheTokens) // an engine with no load gauge may still say its cache's size
			}
			if misses++; misses >= scrapeMisses {
				u.ClearEngineLoad()
			}
		}
		if problem == "" && p.cfg.EngineWaste != nil {
			p.cfg.EngineWaste.EngineWaste(c.Name, em.TokensAfterClientLeft, em.AbortedRequests)
		}
		switch {
		case problem == lastProblem:
		case problem != "":
			p.log.Warn().Str("upstream", c.Name).Err(err).Str("retry_every", interval.String()).
				Msg("engine metrics not scraped: " + problem)
		default:
			p.log.Info().Str("upstream", c.Name).Msg("engine metrics scraped")
		}
		lastProblem = problem
		if !clock.Sleep(p.stopCtx, p.cfg.Clock, interval, nil) {
			return
		}
	}
}

// scrapeOnce reads the engine's /metrics: what it says, or the problem
// that kept it from saying anything ("upstream unreachable", "/metrics
// answers status 404", "/metrics is not Prometheus text"), with its error.
func scrapeOnce(ctx context.Context, client *http.Client, url string) (em engines.EngineMetrics, problem string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return em, "bad URL", err // a URL NewUpstream took; cannot happen
	}
	resp, err := client.Do(req)
	if err != nil {
		return em, "upstream unreachable", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return em, fmt.Sprintf("/metrics answers status %d", resp.StatusCode), fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	em = engines.ParseMetrics(io.LimitReader(resp.Body, 4<<20))
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept
	if em.Families == 0 {
		return em, "/metrics is not Prometheus text", fmt.Errorf("GET %s: no metric in %q", url, resp.Header.Get("Content-Type"))
	}
	return em, "", nil
}
