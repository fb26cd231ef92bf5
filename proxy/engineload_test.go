package proxy

import (
	"bufio"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/engine"
)

func TestParseLoad(t *testing.T) {
	tests := []struct {
		name             string
		text             string
		waiting, running int64
		ok               bool
	}{
		{"vllm, two models", "# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{model_name=\"a\"} 3.0\nvllm:num_requests_waiting{model_name=\"b\"} 2\nvllm:num_requests_running{model_name=\"a\"} 7\n", 5, 7, true},
		{"sglang", "sglang:num_queue_reqs{x=\"y\"} 4\nsglang:num_running_reqs 1\n", 4, 1, true},
		{"tgi", "tgi_queue_size 9\ntgi_batch_current_size 16\n", 9, 16, true},
		{"llama.cpp", "llamacpp:requests_deferred 2\nllamacpp:requests_processing 1\n", 2, 1, true},
		{"a longer name with the same prefix is not it", "vllm:num_requests_waiting_by_reason{reason=\"capacity\"} 99\n", 0, 0, false},
		{"labels with braces and spaces in values", "vllm:num_requests_waiting{model_name=\"a } b\"} 6\n", 6, 0, true},
		{"nothing known", "up 1\n", 0, 0, false},
		{"garbage and NaN", "vllm:num_requests_running NaN\nvllm:num_requests_running{\n", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, r, ok := parseLoad(bufio.NewScanner(strings.NewReader(tt.text)))
			if w != tt.waiting || r != tt.running || ok != tt.ok {
				t.Errorf("got %d %d %v, want %d %d %v", w, r, ok, tt.waiting, tt.running, tt.ok)
			}
		})
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add("vllm:num_requests_waiting{model_name=\"a\"} 3\n")
	f.Add("tgi_queue_size 1e308\ntgi_batch_current_size -1\n")
	f.Fuzz(func(t *testing.T, text string) {
		w, r, _ := parseLoad(bufio.NewScanner(strings.NewReader(text)))
		if w < 0 || r < 0 {
			t.Fatalf("negative load %d %d", w, r)
		}
	})
}

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
