package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/engine"
)

// TestEngineLoadOnRecords scrapes the reference engine's vLLM-named gauges:
// a request routed while another one runs on the engine (one running slot)
// carries the engine's load as last scraped, which shows it busy.
func TestEngineLoadOnRecords(t *testing.T) {
	_, url := startEngine(t, engine.Config{MaxRunning: 1})
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
	var up *upstream
	p.clients.Range(func(_, v any) bool { up = v.(*upstream); return false })
	waitFor(t, func() bool { return up.load.running.Load() >= 1 })

	// The next request is routed now and waits in the engine's queue until
	// the long one's client leaves.
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, addr, short)
	}()
	waitFor(t, func() bool { return up.load.waiting.Load() >= 1 })
	conn.Close()
	<-done
	var r gotRecord
	for range 2 { // the long request's record (client_cancel) and the short one's, in either order
		if g := sink.next(t); g.Reason != endreason.ClientCancel {
			r = g
		}
	}
	if !r.EngineLoad || r.EngineRunning < 1 {
		t.Errorf("record routed while the engine ran another request: load known %v, running %d, waiting %d",
			r.EngineLoad, r.EngineRunning, r.EngineWaiting)
	}
}
