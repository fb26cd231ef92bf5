package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
)

// ttftSink keeps each record's TTFT, as the proxy measured it.
type ttftSink struct {
	mu   sync.Mutex
	ttft []time.Duration
}

func (s *ttftSink) Emit(r *record.Record) {
	if bd := r.Breakdown(); bd.OK {
		s.mu.Lock()
		s.ttft = append(s.ttft, bd.TTFT)
		s.mu.Unlock()
	}
}

// BenchmarkLeastLoadSkewed: TTFT under skewed load, least_request against
// least_load in one run. Two reference engines with two running slots
// each; engine A also serves load from outside the proxy (another
// replica's: three clients in a loop, so one of them always waits there),
// B only the proxy's. Two clients at a time send b.N requests through the
// proxy; p50 and p99 are the TTFT its records report. Run with a fixed
// count, e.g. -benchtime 200x.
func BenchmarkLeastLoadSkewed(b *testing.B) {
	for _, policy := range []string{gateway.PolicyLeastRequest, gateway.PolicyLeastLoad} {
		b.Run(policy, func(b *testing.B) { benchSkewed(b, policy) })
	}
}

func benchSkewed(b *testing.B, policy string) {
	_, urlA := startEngine(b, refengine.Config{MaxRunning: 2})
	_, urlB := startEngine(b, refengine.Config{MaxRunning: 2})
	cfg, err := gateway.Parse([]byte(strings.NewReplacer("UP_A", urlA, "UP_B", urlB, "POLICY", policy).Replace(leastLoadYAML)), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	nop := zerolog.Nop()
	gw, err := gateway.New(cfg, gateway.Options{Log: &nop})
	if err != nil {
		b.Fatal(err)
	}
	sink := &ttftSink{}
	// Both policies scrape alike (least_request only for the records).
	p, err := New(Config{Gateway: gw, ScrapeEngineMetrics: DefaultLeastLoadScrape}, sink, nop)
	if err != nil {
		b.Fatal(err)
	}
	proxyURL := "http://" + serveProxy(b, p, nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}

	ctx, stopOutside := context.WithCancel(context.Background())
	var outside sync.WaitGroup
	for range 3 {
		outside.Go(func() {
			for ctx.Err() == nil {
				postChat(ctx, client, urlA, refChat("64"))
			}
		})
	}
	b.Cleanup(func() {
		stopOutside()
		outside.Wait()
		client.CloseIdleConnections()
	})
	// Let the outside load fill engine A, and its scrape show it.
	a := gw.Snapshot().Pools()[0].Upstreams[0]
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if l, known := a.EngineLoad(); known && l.Waiting > 0 {
			break
		}
	}

	b.ResetTimer()
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for range next {
				postChat(context.Background(), client, proxyURL, refChat("16"))
			}
		})
	}
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	b.StopTimer()

	sink.mu.Lock()
	ttft := slices.Clone(sink.ttft)
	sink.mu.Unlock()
	if len(ttft) != b.N {
		b.Fatalf("%d records with a TTFT, want %d", len(ttft), b.N)
	}
	slices.Sort(ttft)
	b.ReportMetric(quantileUS(ttft, 0.50)/1e3, "ttft-p50-ms")
	b.ReportMetric(quantileUS(ttft, 0.99)/1e3, "ttft-p99-ms")
}

// postChat sends body to baseURL's chat endpoint and reads the answer.
func postChat(ctx context.Context, client *http.Client, baseURL, body string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
