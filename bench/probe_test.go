package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is an OpenAI-style SSE server and a fake admin endpoint that
// serves a record per request id, as the proxy's ring would.
type fakeServer struct {
	first, gap time.Duration // before the first token, between tokens
	mu         sync.Mutex
	seen       map[string]http.Header
	api, admin *httptest.Server
}

func newFake(tb testing.TB, first, gap time.Duration) *fakeServer {
	f := &fakeServer{first: first, gap: gap, seen: map[string]http.Header{}}
	f.api = httptest.NewServer(http.HandlerFunc(f.serve))
	f.admin = httptest.NewServer(http.HandlerFunc(f.serveAdmin))
	tb.Cleanup(func() { f.api.Close(); f.admin.Close() })
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		MaxTokens int  `json:"max_tokens"`
		Stream    bool `json:"stream"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	id := r.Header.Get("X-Request-Id")
	f.mu.Lock()
	f.seen[id] = r.Header.Clone()
	f.mu.Unlock()
	w.Header().Set("X-Request-Id", id)
	switch r.Header.Get("X-Fake") {
	case "503":
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
		return
	}
	if !body.Stream {
		time.Sleep(f.first)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"length"}],"usage":{"completion_tokens":%d}}`, body.MaxTokens)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n: keep-alive comment\n\n")
	fl.Flush()
	time.Sleep(f.first)
	for i := range body.MaxTokens {
		if i > 0 {
			time.Sleep(f.gap)
		}
		if r.Header.Get("X-Fake") == "cut" && i == 2 {
			return // ends the body without a finish or [DONE]
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
		fl.Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
}

// serveAdmin answers /debug/requests/{id} with a record whose TTFT is the
// server's first-token delay, all in prefill.
func (f *fakeServer) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/debug/requests" {
		fmt.Fprint(w, `{"total":0,"recent":[],"slowest":[]}`)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/debug/requests/")
	f.mu.Lock()
	_, ok := f.seen[id]
	f.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":{"code":"unknown_request_id"}}`, http.StatusNotFound)
		return
	}
	ttft := float64(f.first) / 1e6
	fmt.Fprintf(w, `{"request_id":%q,"path":"/v1/chat/completions","model":"m","status":200,"end_reason":"length","end_detail":"finish_length",`+
		`"ttft_ms":%g,"e2e_ms":%g,"stages_ms":{"gateway":0,"route":0,"queue":0,"preparation":0,"prefill":%g,"first_decode":0,"unattributed":0,"transport":0},`+
		`"engine_ms":{"prefill":%g,"sync":0},"tokens_out":4,"buffering":["burst"]}`, id, ttft, ttft*2, ttft, ttft)
}

func TestProbe(t *testing.T) {
	f := newFake(t, 20*time.Millisecond, 5*time.Millisecond)
	tests := []struct {
		name  string
		cfg   Config
		check func(t *testing.T, run *Run, s Summary)
	}{
		{"closed loop, joined", Config{Concurrency: 2, Requests: 6, Warmup: 2, OutputTokens: Dist{4, 4}, APIKey: "k",
			Header: http.Header{"X-Extra": {"1"}}},
			func(t *testing.T, run *Run, s Summary) {
				if len(run.Results) != 8 || s.Requests != 6 || s.Errors != 0 || s.Joined != 6 {
					t.Fatalf("results %d, summary %+v", len(run.Results), s)
				}
				for _, r := range run.Results {
					if !r.HasTTFT || r.TTFT < 20*time.Millisecond || r.Tokens != 4 || len(r.Gaps) != 3 || r.Finish != "length" {
						t.Errorf("result %+v", r)
					}
					// Gaps are inter-arrival times: none is negative and they
					// fit between the first token and the end of the body,
					// which the server reaches no sooner than 20 + 3×5 ms.
					// (One gap alone may be shorter than the server's 5 ms
					// when the token before it arrived late.)
					sum := r.TTFT
					for _, g := range r.Gaps {
						if g < 0 {
							t.Errorf("gap %v", g)
						}
						sum += g
					}
					if sum > r.E2E || r.E2E < 35*time.Millisecond {
						t.Errorf("TTFT + gaps = %v, end to end %v (the server needs at least 35ms)", sum, r.E2E)
					}
					h := f.seen[r.ID]
					if h.Get("Authorization") != "Bearer k" || h.Get("X-Extra") != "1" || !strings.HasPrefix(r.ID, "bench-") {
						t.Errorf("request headers %v (id %s)", h, r.ID)
					}
				}
				b := s.Breakdown
				if b == nil || b.N != 6 || b.Median[Outside] <= 0 || b.P50.ProxyTTFT != 20*time.Millisecond || b.Buffered != 6 {
					t.Fatalf("breakdown %+v", b)
				}
				if got := b.P50.Parts[Outside] + b.P50.ProxyTTFT; got != b.P50.ClientTTFT {
					t.Errorf("p50 parts add to %v, client TTFT %v", got, b.P50.ClientTTFT)
				}
				if len(s.EndReasons) != 1 || s.EndReasons[0].Reason != "length" || s.EndReasons[0].N != 6 {
					t.Errorf("end reasons %+v", s.EndReasons)
				}
			}},
		{"open loop", Config{Rate: 200, Requests: 10, OutputTokens: Dist{2, 2}},
			func(t *testing.T, run *Run, s Summary) {
				if s.Requests != 10 || s.Errors != 0 {
					t.Fatalf("summary %+v", s)
				}
				// Poisson arrivals at 200/s: the requests overlap (each
				// takes 25 ms), so they were not sent one after another.
				var last time.Duration
				for _, r := range run.Results {
					last = max(last, r.Start)
				}
				if last > 200*time.Millisecond {
					t.Errorf("last start at %v: arrivals not on a 200/s schedule", last)
				}
			}},
		{"not streamed", Config{Requests: 2, NoStream: true, OutputTokens: Dist{7, 7}},
			func(t *testing.T, run *Run, s Summary) {
				for _, r := range run.Results {
					if !r.OK() || !r.HasTTFT || r.TTFT != r.E2E || r.Tokens != 7 {
						t.Errorf("result %+v", r)
					}
				}
			}},
		{"errors", Config{Requests: 2, OutputTokens: Dist{4, 4}, Header: http.Header{"X-Fake": {"503"}}},
			func(t *testing.T, run *Run, s Summary) {
				if s.Errors != 2 || run.Results[0].End != "http_503" {
					t.Errorf("summary %+v, first %+v", s, run.Results[0])
				}
			}},
		{"cut stream", Config{Requests: 1, OutputTokens: Dist{4, 4}, Header: http.Header{"X-Fake": {"cut"}}},
			func(t *testing.T, run *Run, s Summary) {
				if r := run.Results[0]; r.End != "cut" || r.Tokens != 2 {
					t.Errorf("result %+v", r)
				}
			}},
		{"timeout", Config{Requests: 1, OutputTokens: Dist{4, 4}, Timeout: 5 * time.Millisecond},
			func(t *testing.T, run *Run, s Summary) {
				if r := run.Results[0]; r.End != "timeout" {
					t.Errorf("result %+v", r)
				}
			}},
		{"by duration", Config{Duration: 100 * time.Millisecond, Concurrency: 2, OutputTokens: Dist{1, 1}},
			func(t *testing.T, run *Run, s Summary) {
				// Each client sends its first request, and starts no
				// other past 100 ms; a request takes the server's 20 ms at
				// least, so a client starts at most 6. (How many between
				// depends on how busy the machine is.)
				if s.Requests < 2 || s.Requests > 12 {
					t.Errorf("%d requests in 100ms of 2 clients at 20ms or more each", s.Requests)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL, cfg.Admin = f.api.URL, f.admin.URL
			run, err := cfg.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := Summarize(run)
			tt.check(t, run, s)
			var b strings.Builder
			s.WriteText(&b, cfg.Describe())
			if _, err := json.Marshal(s); err != nil {
				t.Fatal(err)
			}
			if t.Failed() {
				t.Log(b.String())
			}
		})
	}
}

func TestProbeWithoutAdmin(t *testing.T) {
	f := newFake(t, time.Millisecond, time.Millisecond)
	run, err := Config{URL: f.api.URL, Admin: "http://127.0.0.1:1", Requests: 2, OutputTokens: Dist{2, 2}}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(run)
	if !strings.Contains(s.JoinNote, "not reachable") || s.Breakdown != nil || s.EndReasons[0].Detail != "client" {
		t.Errorf("summary %+v", s)
	}
	var b strings.Builder
	s.WriteText(&b, "")
	if !strings.Contains(b.String(), "client-side numbers only") {
		t.Errorf("text does not say the join is off:\n%s", b.String())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Requests: 1, Rate: -1}, {Requests: 1, URL: "ftp://x"}} {
		if _, err := c.Run(context.Background()); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// BenchmarkReadStream is the probe's own cost per event: reading a
// 16-token chat stream from memory line by line, timing and decoding each
// event.
func BenchmarkReadStream(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for i := range 16 {
		fmt.Fprintf(&sb, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	sb.WriteString("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":16}}\n\ndata: [DONE]\n\n")
	stream := sb.String()
	p := &probe{base: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		var r Result
		p.readStream(context.Background(), &r, strings.NewReader(stream), 0)
		if r.Tokens != 16 || r.End != "done" {
			b.Fatalf("%+v", r)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/18, "ns/event")
}

// BenchmarkProbeOverhead is what the probe adds to a client-seen TTFT: the
// same trivial SSE server (first token at once) is timed by the probe and
// by a bare client (net/http, reading until the first content line), 50
// requests each per op, in alternation. It reports both clients' p50 and
// p99 and the difference of the p50s.
func BenchmarkProbeOverhead(b *testing.B) {
	f := newFake(b, 0, 0)
	const per = 50
	var probeTTFT, bareTTFT []time.Duration
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	bare := &http.Client{Transport: tr}
	for b.Loop() {
		run, err := Config{URL: f.api.URL, Requests: per, OutputTokens: Dist{16, 16}, Transport: tr}.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range run.Results {
			if !r.HasTTFT {
				b.Fatalf("probe: no first token: %+v", r)
			}
			probeTTFT = append(probeTTFT, r.TTFT)
		}
		for range per {
			bareTTFT = append(bareTTFT, bareFirstToken(b, bare, f.api.URL))
		}
	}
	p, q := sortedCopy(probeTTFT), sortedCopy(bareTTFT)
	b.ReportMetric(float64(Percentile(p, .5)), "probe-p50-ns")
	b.ReportMetric(float64(Percentile(q, .5)), "bare-p50-ns")
	b.ReportMetric(float64(Percentile(p, .5)-Percentile(q, .5)), "added-p50-ns")
	b.ReportMetric(float64(Percentile(p, .99)), "probe-p99-ns")
	b.ReportMetric(float64(Percentile(q, .99)), "bare-p99-ns")
}

// bareFirstToken is the time from sending a streamed request with a bare
// net/http client to reading its first content line.
func bareFirstToken(b *testing.B, c *http.Client, url string) time.Duration {
	body := `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	start := time.Now()
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got strings.Builder
	for {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if strings.Contains(got.String(), `"content":"t0`) {
			break
		}
		if err != nil {
			b.Fatalf("bare client: no first token in %q (%v)", got.String(), err)
		}
	}
	ttft := time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	return ttft
}
