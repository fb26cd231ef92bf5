package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// benchUpstream is an SSE server whose events carry their send time on the
// process's monotonic clock, so a client in the same process can measure
// each event's delivery latency.
func benchUpstream(b *testing.B, events int, gap time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		buf := make([]byte, 0, 256)
		for i := range events {
			buf = append(buf[:0], `data: {"choices":[{"index":0,"delta":{"content":"tok"}}],"t":`...)
			buf = strconv.AppendInt(buf, stages.Monotonic(), 10)
			buf = append(buf, "}\n\n"...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			fl.Flush()
			if gap > 0 && i < events-1 {
				time.Sleep(gap)
			}
		}
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// benchProxy runs the proxy in front of up, emitting to sink, and returns
// its base URL and a client keeping up to 2*conc idle connections. Both are
// closed when the benchmark run ends.
func benchProxy(b *testing.B, up string, sink record.Sink, conc int) (string, *http.Client) {
	p, err := New(Config{Upstream: up}, sink, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * conc, DisableCompression: true}}
	b.Cleanup(func() {
		client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), client
}

// quantileUS is the q-quantile of sorted s, in microseconds.
func quantileUS(s []time.Duration, q float64) float64 {
	return float64(s[min(int(q*float64(len(s))), len(s)-1)]) / 1e3
}

// ownTimeSink keeps, per record, the proxy's own time on the request path:
// receipt → request written upstream, plus first token parsed → flushed to
// the client. Noise outside the proxy does not inflate it.
type ownTimeSink struct {
	mu  sync.Mutex
	own []time.Duration
}

func (s *ownTimeSink) Emit(r *record.Record) {
	tl := &r.Timeline
	sent, ok1 := tl.At(stages.UpstreamSent)
	first, ok2 := tl.At(stages.FirstToken)
	flushed, ok3 := tl.At(stages.FirstTokenFlushed)
	if ok1 && ok2 && ok3 {
		s.mu.Lock()
		s.own = append(s.own, sent+flushed-first)
		s.mu.Unlock()
	}
}

// streamOnce sends one streaming request and returns the client-seen time
// to the first content event and each event's delivery latency.
func streamOnce(client *http.Client, url string) (ttft time.Duration, lat []time.Duration, err error) {
	start := stages.Monotonic()
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			break
		}
		i := bytes.Index(line, []byte(`"t":`))
		if i < 0 {
			continue
		}
		now := stages.Monotonic()
		if ttft == 0 {
			ttft = time.Duration(now - start)
		}
		sent, _ := strconv.ParseInt(string(bytes.TrimRight(line[i+4:], "}\n")), 10, 64)
		lat = append(lat, time.Duration(now-sent))
	}
	if ttft == 0 {
		return 0, nil, fmt.Errorf("no content event")
	}
	return ttft, lat, nil
}

// BenchmarkAddedLatency measures what the proxy adds, against the same
// upstream reached directly in the same run: time to first token (one
// immediate event per request) and per-event delivery latency (20 events,
// 2 ms apart). Direct and proxied requests alternate, at concurrency 1 and
// 64. Client, proxy and upstream share this process and its cores.
func BenchmarkAddedLatency(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("ttft/c=%d", conc), func(b *testing.B) {
			benchAdded(b, conc, 1, 0, func(ttft time.Duration, _ []time.Duration, out *[]time.Duration) {
				*out = append(*out, ttft)
			}, "ttft")
		})
		b.Run(fmt.Sprintf("event/c=%d", conc), func(b *testing.B) {
			benchAdded(b, conc, 20, 2*time.Millisecond, func(_ time.Duration, lat []time.Duration, out *[]time.Duration) {
				*out = append(*out, lat...)
			}, "event")
		})
	}
}

func benchAdded(b *testing.B, conc, events int, gap time.Duration, take func(time.Duration, []time.Duration, *[]time.Duration), what string) {
	up := benchUpstream(b, events, gap)
	own := new(ownTimeSink)
	via, client := benchProxy(b, up, own, conc)

	var mu sync.Mutex
	var direct, proxied []time.Duration
	// Warm both paths: connections, pools, parsers.
	for range 2 * conc {
		streamOnce(client, up)
		streamOnce(client, via)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + conc - 1) / conc
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d, v []time.Duration
			for range per {
				t1, l1, err1 := streamOnce(client, up)
				t2, l2, err2 := streamOnce(client, via)
				if err1 != nil || err2 != nil {
					b.Error(err1, err2)
					return
				}
				take(t1, l1, &d)
				take(t2, l2, &v)
			}
			mu.Lock()
			direct, proxied = append(direct, d...), append(proxied, v...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(direct)
	slices.Sort(proxied)
	b.ReportMetric(quantileUS(direct, 0.5), what+"_direct_p50_us")
	b.ReportMetric(quantileUS(proxied, 0.5), what+"_proxied_p50_us")
	b.ReportMetric(quantileUS(proxied, 0.5)-quantileUS(direct, 0.5), what+"_added_p50_us")
	b.ReportMetric(quantileUS(proxied, 0.99)-quantileUS(direct, 0.99), what+"_added_p99_us")
	if what == "ttft" && len(own.own) > 0 {
		slices.Sort(own.own)
		b.ReportMetric(quantileUS(own.own, 0.5), "proxy_own_p50_us")
		b.ReportMetric(quantileUS(own.own, 0.99), "proxy_own_p99_us")
	}
	b.ReportMetric(0, "ns/op")
}
