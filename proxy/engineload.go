package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Engine load from the engine's own /metrics, for engines that say nothing
// per request: each record gets the engine's waiting and running counts as
// last scraped before the request was routed (Config.ScrapeEngineMetrics).
// A queue can then be seen where it cannot be measured.

// loadSeries are the gauges that count an engine's waiting and running
// requests, by engine (research: engine-signals.md §1.3, §2, §3.3, §4.2).
var loadSeries = []struct {
	name    string
	waiting bool
}{
	{"vllm:num_requests_waiting", true},
	{"vllm:num_requests_running", false},
	{"sglang:num_queue_reqs", true},
	{"sglang:num_running_reqs", false},
	{"tgi_queue_size", true},
	{"tgi_batch_current_size", false},
	{"llamacpp:requests_deferred", true},
	{"llamacpp:requests_processing", false},
}

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

// scrapeOnce reads the load gauges from a Prometheus text exposition,
// summing each over its label sets (one engine may serve several models).
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
	return parseLoad(bufio.NewScanner(resp.Body))
}

// parseLoad is scrapeOnce's parser, over the exposition's lines.
func parseLoad(sc *bufio.Scanner) (waiting, running int64, ok bool) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		for _, s := range loadSeries {
			if !bytes.HasPrefix(line, []byte(s.name)) {
				continue
			}
			rest := line[len(s.name):]
			if len(rest) == 0 || (rest[0] != '{' && rest[0] != ' ') {
				continue // a longer name with this prefix
			}
			if i := bytes.LastIndexByte(rest, '}'); i >= 0 {
				rest = rest[i+1:]
			}
			fields := bytes.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			v, err := strconv.ParseFloat(string(fields[0]), 64)
			if err != nil || v != v || v < 0 || v > 1e12 { // NaN, or not a count of requests
				continue
			}
			if s.waiting {
				waiting += int64(v)
			} else {
				running += int64(v)
			}
			ok = true
		}
	}
	return waiting, running, ok
}
