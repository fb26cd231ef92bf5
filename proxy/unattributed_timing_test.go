package proxy

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

// shareSink keeps, per streamed record with a breakdown, unattributed as a
// share of TTFT, and the request id to join the engine's ground truth.
type shareSink struct {
	mu     sync.Mutex
	shares []float64
	unattr []time.Duration
	ttft   []time.Duration
	ids    []string
}

func (s *shareSink) Emit(r *record.Record) {
	bd := r.Breakdown()
	if !bd.OK || bd.TTFT <= 0 {
		return
	}
	u := bd.Stages[stages.Unattributed]
	s.mu.Lock()
	s.shares = append(s.shares, float64(u)/float64(bd.TTFT))
	s.unattr = append(s.unattr, u)
	s.ttft = append(s.ttft, bd.TTFT)
	s.ids = append(s.ids, r.RequestID)
	s.mu.Unlock()
}

func (s *shareSink) reset() {
	s.mu.Lock()
	s.shares, s.unattr, s.ttft, s.ids = s.shares[:0], s.unattr[:0], s.ttft[:0], s.ids[:0]
	s.mu.Unlock()
}

// unattributedBody is a short streamed chat request, as a client would send
// it; the prompt repeats, so the engine's prefix cache is warm.
const unattributedBody = `{"model":"ttftlens-ref","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"Tell me a story"}]}`

// BenchmarkUnattributed measures how much of TTFT stays unattributed with
// the reference engine behind the proxy, both in this process, on loopback:
// one streamed chat request per op, conc clients, after a warm-up. It
// reports the p50 and p99 of unattributed / TTFT over the records, their
// unattributed and TTFT p50, and the p50 of the engine's own time from
// sampling the first token to having written it (its ground truth: the
// hand-off). Run it with -benchtime 500x.
func BenchmarkUnattributed(b *testing.B) {
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("c=%d", conc), func(b *testing.B) {
			eng, up := startEngine(b, refengine.Config{})
			sink := new(shareSink)
			via, client := benchProxy(b, up, sink, conc)
			run := func(n int) {
				var wg sync.WaitGroup
				for w := range conc {
					wg.Go(func() {
						for i := w; i < n; i += conc {
							if err := postDrain(client, via+"/v1/chat/completions", unattributedBody); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			run(50 * conc) // warm: connections, pools, the prefix cache
			sink.reset()
			b.ResetTimer()
			run(b.N)
			b.StopTimer()

			sink.mu.Lock()
			defer sink.mu.Unlock()
			if len(sink.shares) == 0 {
				b.Fatal("no record with a breakdown")
			}
			var handoff []time.Duration
			for _, id := range sink.ids {
				if t, ok := eng.Truth(id); ok && t.TTFT > 0 {
					handoff = append(handoff, t.TTFT-t.FirstTokenSampled)
				}
			}
			slices.Sort(sink.shares)
			slices.Sort(sink.unattr)
			slices.Sort(sink.ttft)
			slices.Sort(handoff)
			q := func(s []float64, p float64) float64 { return s[min(int(p*float64(len(s))), len(s)-1)] }
			b.ReportMetric(100*q(sink.shares, 0.5), "unattr_p50_%")
			b.ReportMetric(100*q(sink.shares, 0.99), "unattr_p99_%")
			b.ReportMetric(quantileUS(sink.unattr, 0.5), "unattr_p50_us")
			b.ReportMetric(quantileUS(sink.ttft, 0.5), "ttft_p50_us")
			if len(handoff) > 0 {
				b.ReportMetric(quantileUS(handoff, 0.5), "engine_handoff_p50_us")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// postDrain sends one request and reads its whole response.
func postDrain(client *http.Client, url, body string) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
