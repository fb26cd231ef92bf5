package proxy

import (
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/engine"
)

// TestEngineLoadOnRecords scrapes the reference engine's vLLM-named gauges:
// with one running slot and several clients, later requests arrive to a
// non-empty engine queue, and their records say so.
func TestEngineLoadOnRecords(t *testing.T) {
	_, url := startEngine(t, engine.Config{MaxRunning: 1})
	addr, sink, _ := startProxy(t, url, func(c *Config) { c.ScrapeEngineMetrics = 20 * time.Millisecond })
	body := `{"model":"ttftlens-ref","stream":true,"max_tokens":40,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
	post(t, addr, body) // first use starts the scraper
	if r := sink.next(t); !r.EngineLoad {
		t.Logf("first request routed before the first scrape (load unknown), as expected")
	}
	time.Sleep(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 60 * time.Millisecond) // arrive while others run
			post(t, addr, body)
		}()
	}
	wg.Wait()
	sawQueue := false
	for range 4 {
		r := sink.next(t)
		if !r.EngineLoad {
			t.Error("record without engine load after scraping began")
		}
		sawQueue = sawQueue || r.EngineWaiting > 0 || r.EngineRunning > 0
	}
	if !sawQueue {
		t.Error("no record saw the engine busy")
	}
}
