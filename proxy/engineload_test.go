package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/logtest"
	"github.com/ttftlens/ttftlens/refengine"
)

// TestEngineLoadOnRecords scrapes the reference engine's vLLM-named gauges:
// a request routed while another one runs on the engine (one running slot)
// carries the engine's load as last scraped, which shows it busy.
func TestEngineLoadOnRecords(t *testing.T) {
	// Every step a few ms long: the long request cannot end on its own
	// before its client leaves, however slow the machine.
	e, url := startEngine(t, refengine.Config{MaxRunning: 1, Faults: "straggler=0:2ms"})
	addr, sink, p := startProxy(t, url, func(c *Config) { c.ScrapeEngineMetrics = 20 * time.Millisecond })
	short := `{"model":"ttftlens-ref","stream":true,"max_tokens":5,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	post(t, addr, short) // first use starts the scraper
	sink.next(t)

	// A long request runs on the engine...
	long := strings.Replace(short, `"max_tokens":5`, `"max_tokens":1900`, 1)
	conn, br := rawClient(t, addr, long)
	defer conn.Close()
	readUntil(t, br, `"content"`)
	// ...and a scrape has seen it.
	up := p.Gateway().Snapshot().Pools()[0].Upstreams[0]
	waitFor(t, func() bool { l, _ := up.EngineLoad(); return l.Running >= 1 })
	// The same scrape read the size of its cache (vllm:cache_config_info).
	if l, _ := up.EngineLoad(); l.CacheTokens != int64(16*kvTotal(e)) {
		t.Errorf("the engine's cache: %d tokens, want %d", l.CacheTokens, 16*kvTotal(e))
	}

	// The next request is routed now and waits in the engine's queue until
	// the long one's client leaves.
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, addr, short)
	}()
	waitFor(t, func() bool { l, _ := up.EngineLoad(); return l.Waiting >= 1 })
	conn.Close()
	<-done
	var r gotRecord
	cancels := 0
	for range 2 { // the long request's record (client_cancel) and the short one's, in either order
		if g := sink.next(t); g.Reason == endreason.ClientCancel {
			cancels++
		} else {
			r = g
		}
	}
	if cancels != 1 {
		t.Fatalf("%d client_cancel records, want the long request's", cancels)
	}
	if !r.EngineLoad || r.EngineRunning < 1 {
		t.Errorf("record routed while the engine ran another request: load known %v, running %d, waiting %d",
			r.EngineLoad, r.EngineRunning, r.EngineWaiting)
	}
}

// wasteCounts keeps the engine counts last scraped for each upstream.
type wasteCounts struct {
	mu   sync.Mutex
	last map[string][2]int64 // tokens after the client left, aborted requests
}

func (w *wasteCounts) EngineWaste(upstream string, tokensAfterClientLeft, abortedRequests int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last[upstream] = [2]int64{tokensAfterClientLeft, abortedRequests}
}

func (w *wasteCounts) get(upstream string) ([2]int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.last[upstream]
	return c, ok
}

// TestEngineWasteScraped: a client leaves a stream whose engine goes on for
// nine tokens after the proxy closed its connection; the proxy's scrape of
// the engine's /metrics hands on the engine's counts under the upstream's
// name: those nine tokens, and the request the engine then aborted.
func TestEngineWasteScraped(t *testing.T) {
	srv, url := startEngine(t, refengine.Config{})
	waste := &wasteCounts{last: map[string][2]int64{}}
	addr, sink, _ := startProxy(t, url, func(c *Config) {
		c.UpstreamName, c.AllowFaults = "ref", true
		c.ScrapeEngineMetrics, c.EngineWaste = 20*time.Millisecond, waste
	})
	conn := dialProxy(t, addr)
	body := `{"model":"ttftlens-ref","stream":true,"max_tokens":500,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Ttftlens-Fault: ignore_disconnect=9\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	readUntil(t, bufio.NewReader(conn), `"content"`)
	conn.Close()
	if r := sink.next(t); r.Reason != endreason.ClientCancel {
		t.Fatalf("record %s/%s, want client_cancel", r.Reason, r.Detail)
	}

	want := [2]int64{9, 1}
	waitFor(t, func() bool { c, _ := waste.get("ref"); return c == want })
	aborted, after := srv.Counters()
	if c, ok := waste.get("ref"); c != want || c != [2]int64{after, aborted} {
		t.Errorf("scraped for upstream ref: %v (%v), want %v: the engine counts %d tokens after the client left, %d aborted", c, ok, want, after, aborted)
	}
}

// TestScrapeProblemLoggedOnce: by default every upstream's /metrics is
// scraped from the start, every DefaultEngineScrape (on Config.Clock, a
// fake here); one that cannot be read costs one warning, not one per
// scrape, and another only when the problem changes; its recovery, one
// info line.
func TestScrapeProblemLoggedOnce(t *testing.T) {
	var answer atomic.Pointer[func(http.ResponseWriter)]
	set := func(f func(http.ResponseWriter)) { answer.Store(&f) }
	status := func(code int, body string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { w.WriteHeader(code); io.WriteString(w, body) }
	}
	set(status(http.StatusNotFound, "404 page not found\n"))
	addr := closedAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the reserved port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*answer.Load())(w) })}
	go srv.Serve(ln)
	defer srv.Close()

	clk := &clock.Fake{}
	logs := &logtest.Lines{}
	waste := &wasteCounts{last: map[string][2]int64{}}
	p, err := New(Config{Upstream: "http://" + addr, UpstreamName: "engine", Clock: clk, EngineWaste: waste}, newCaptureSink(t), zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	const msg = "engine metrics not scraped: "
	steps := []struct {
		name   string
		answer func(http.ResponseWriter)
		close  bool // the upstream stops listening
		line   string
	}{
		{"the first scrape: no /metrics", nil, false, msg + "/metrics answers status 404"},
		{"still none", nil, false, ""},
		{"still none", nil, false, ""},
		{"an HTML page", status(http.StatusOK, "<!doctype html><html><body>hi</body></html>"), false, msg + "/metrics is not Prometheus text"},
		{"again", nil, false, ""},
		{"metrics", status(http.StatusOK, "ttftlens_engine_aborted_requests_total 3\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"10\"} 1\n"), false, "engine metrics scraped"},
		{"metrics again", nil, false, ""},
		{"unreachable", nil, true, msg + "upstream unreachable"},
		{"still unreachable", nil, false, ""},
	}
	for i, st := range steps {
		if st.answer != nil {
			set(st.answer)
		}
		if st.close {
			srv.Close()
		}
		if i > 0 {
			clk.Advance(DefaultEngineScrape)
		}
		if d := clk.WaitArmed(1); d != DefaultEngineScrape { // the scrape is done, the next one waits
			t.Fatalf("%s: next scrape in %v, want %v", st.name, d, DefaultEngineScrape)
		}
		lines := logs.Take(t)
		switch {
		case st.line == "" && len(lines) != 0:
			t.Errorf("%s: logged %v", st.name, lines)
		case st.line != "" && (len(lines) != 1 || lines[0]["message"] != st.line || lines[0]["upstream"] != "engine"):
			t.Errorf("%s: logged %v, want one line %q", st.name, lines, st.line)
		}
	}
	if c, ok := waste.get("engine"); !ok || c != [2]int64{-1, 3} {
		t.Errorf("engine waste %v (%v), want the scraped counts", c, ok)
	}
	// No load gauge, but the cache's size: kept.
	if n := p.Gateway().Snapshot().Pools()[0].Upstreams[0].CacheTokens(); n != 160 {
		t.Errorf("the engine's cache: %d tokens, want 160", n)
	}
}

// TestScrapePlan: the upstreams of a pool that routes on the engines' load
// (least_load, least_ttft) are scraped every DefaultLeastLoadScrape unless
// the flag gives an interval; the others at the flag's, or every
// DefaultEngineScrape by default, or not at all when it is off.
func TestScrapePlan(t *testing.T) {
	for _, tc := range []struct {
		policy string
		flag   time.Duration // Config.ScrapeEngineMetrics: 0 the default, < 0 off
		want   time.Duration
	}{
		{gateway.PolicyLeastRequest, 0, DefaultEngineScrape},
		{gateway.PolicyRoundRobin, 0, DefaultEngineScrape},
		{gateway.PolicyLeastLoad, 0, DefaultLeastLoadScrape},
		{gateway.PolicyLeastTTFT, 0, DefaultLeastLoadScrape},
		{gateway.PolicyLeastTTFT, 2 * time.Second, 2 * time.Second},
		{gateway.PolicyLeastTTFT, -1, DefaultLeastLoadScrape},
		{gateway.PolicyLeastRequest, -1, 0},
	} {
		yaml := strings.NewReplacer("POLICY", tc.policy, "UP_A", "http://127.0.0.1:1", "UP_B", "http://127.0.0.1:2").Replace(leastLoadYAML)
		cfg, err := gateway.Parse([]byte(yaml), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		gw, err := gateway.New(cfg, gateway.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p := &Proxy{gw: gw, cfg: Config{ScrapeEngineMetrics: tc.flag}}
		if up, every := p.scrapePlan("http://127.0.0.1:1"); up == nil || every != tc.want {
			t.Errorf("%s, flag %v: scraped every %v (upstream %v), want %v", tc.policy, tc.flag, every, up != nil, tc.want)
		}
		if up, every := p.scrapePlan("http://127.0.0.1:9"); up != nil || every != 0 {
			t.Errorf("%s: an upstream of no pool scraped every %v", tc.policy, every)
		}
	}
}

// kvTotal is the blocks of e's KV cache.
func kvTotal(e *refengine.Server) int {
	_, total := e.KVBlocks()
	return total
}
