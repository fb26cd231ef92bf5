//go:build integration

package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttftlens/ttftlens/bench/lab"
	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/internal/testbin"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// stack is bench/lab's stack: the proxy in front of the reference engine,
// with the admin handler serving the page and the ring.
type stack struct {
	proxyAddr, adminAddr string
	ring                 *exporters.Ring
}

func startStack(t *testing.T) *stack {
	t.Helper()
	s, err := lab.Start(lab.StackConfig{
		Registry:    prometheus.NewRegistry(),
		AdminRoutes: Routes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stack close: %v", err)
		}
	})
	return &stack{proxyAddr: strings.TrimPrefix(s.URL, "http://"), adminAddr: strings.TrimPrefix(s.Admin, "http://"), ring: s.Ring}
}

// send posts a request with the given id through the proxy and waits for
// the ring to hold its record.
func (s *stack) send(t *testing.T, id, path, body string, hdr ...string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+s.proxyAddr+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, ok := s.ring.Lookup(id); ok {
			return
		}
	}
	t.Fatalf("no record for %s", id)
}

// emitReasoning puts a reasoning model's record with the given id in the
// ring (the reference engine does not reason): its first token at 40 ms,
// its answer from 1.2 s, its last token at 1.5 s.
func (s *stack) emitReasoning(id string) {
	var r record.Record
	r.Timeline.Start(func() int64 { return 0 }, time.Now())
	for _, m := range []struct {
		mark stages.Mark
		at   time.Duration
	}{
		{stages.GatewayDone, 50 * time.Microsecond}, {stages.Routed, 60 * time.Microsecond}, {stages.Admitted, 70 * time.Microsecond},
		{stages.UpstreamSent, 100 * time.Microsecond}, {stages.UpstreamHeaders, 2 * time.Millisecond}, {stages.FirstEvent, 30 * time.Millisecond},
		{stages.FirstToken, 40 * time.Millisecond}, {stages.FirstTokenFlushed, 40*time.Millisecond + 50*time.Microsecond},
		{stages.FirstAnswer, 1200 * time.Millisecond}, {stages.LastToken, 1500 * time.Millisecond}, {stages.Done, 1501 * time.Millisecond},
	} {
		r.Timeline.MarkAt(m.mark, m.at)
	}
	r.Timeline.SetEngine(stages.EnginePrefill, 25*time.Millisecond)
	r.RequestID, r.Method, r.Path, r.Model, r.Streaming, r.Status = id, "POST", "/v1/chat/completions", "ttftlens-ref", true, 200
	r.EngineSource, r.Reason, r.Detail = "llamacpp", endreason.Stop, endreason.DetailStop
	r.TokensOut, r.ReasoningTokens = 100, 80
	s.ring.Emit(&r)
}

// emitColdLoad puts in the ring the record of a request that waited for a
// model load the engine reported and for a slot, a queue the proxy
// inferred.
func (s *stack) emitColdLoad(id string) {
	var r record.Record
	r.Timeline.Start(func() int64 { return 0 }, time.Now())
	for _, m := range []struct {
		mark stages.Mark
		at   time.Duration
	}{
		{stages.GatewayDone, 50 * time.Microsecond}, {stages.Routed, 60 * time.Microsecond}, {stages.Admitted, 70 * time.Microsecond},
		{stages.UpstreamSent, 100 * time.Microsecond}, {stages.UpstreamHeaders, 420 * time.Millisecond}, {stages.FirstEvent, 420 * time.Millisecond},
		{stages.FirstToken, 420 * time.Millisecond}, {stages.FirstTokenFlushed, 420*time.Millisecond + 50*time.Microsecond},
		{stages.FirstAnswer, 420*time.Millisecond + 50*time.Microsecond}, {stages.LastToken, 600 * time.Millisecond}, {stages.Done, 601 * time.Millisecond},
	} {
		r.Timeline.MarkAt(m.mark, m.at)
	}
	r.Timeline.SetEngine(stages.EngineLoad, 290*time.Millisecond)
	r.Timeline.SetEngine(stages.EnginePrefill, 40*time.Millisecond)
	r.Timeline.InferEngine(stages.EngineQueue, 85*time.Millisecond)
	r.RequestID, r.Method, r.Path, r.Model, r.Streaming, r.Status = id, "POST", "/api/chat", "llama3.2", true, 200
	r.EngineSource, r.Reason, r.Detail = "ollama", endreason.Stop, endreason.DetailStop
	r.TokensOut = 20
	s.ring.Emit(&r)
}

// emitPredicted puts in the ring the record of a request a least_ttft pool
// routed with a prediction, 384 of its prompt tokens cached where 400 were
// expected: its queue took 8 ms longer than predicted. With firstToken
// false it timed out before its first token.
func (s *stack) emitPredicted(id string, firstToken bool) {
	var r record.Record
	r.Timeline.Start(func() int64 { return 0 }, time.Now())
	marks := []struct {
		mark stages.Mark
		at   time.Duration
	}{
		{stages.GatewayDone, 50 * time.Microsecond}, {stages.Routed, 60 * time.Microsecond}, {stages.Admitted, 70 * time.Microsecond},
		{stages.UpstreamSent, 100 * time.Microsecond}, {stages.UpstreamHeaders, 2 * time.Millisecond},
	}
	if firstToken {
		marks = append(marks, []struct {
			mark stages.Mark
			at   time.Duration
		}{
			{stages.FirstEvent, 38 * time.Millisecond}, {stages.FirstToken, 40 * time.Millisecond}, {stages.FirstTokenFlushed, 40*time.Millisecond + 50*time.Microsecond},
			{stages.LastToken, 200 * time.Millisecond}, {stages.Done, 201 * time.Millisecond},
		}...)
		r.Timeline.SetEngine(stages.EngineQueue, 12*time.Millisecond)
		r.Timeline.SetEngine(stages.EnginePrefill, 20*time.Millisecond)
		r.EngineSource, r.Reason, r.Detail, r.Status = "server-timing", endreason.Stop, endreason.DetailStop, 200
		r.TokensOut, r.CachedTokens, r.CachedReported = 40, 384, true
		r.PredictionOff, r.PredictionOffBy = stages.Queue, -8*time.Millisecond
	} else {
		marks = append(marks, struct {
			mark stages.Mark
			at   time.Duration
		}{stages.Done, 300 * time.Millisecond})
		r.Reason, r.Detail, r.Status = endreason.Deadline, endreason.DetailTTFTDeadline, 504
	}
	for _, m := range marks {
		r.Timeline.MarkAt(m.mark, m.at)
	}
	r.RequestID, r.Method, r.Path, r.Model, r.Streaming = id, "POST", "/v1/chat/completions", "ttftlens-ref", true
	r.Policy, r.Predicted, r.CachedExpected, r.TTFTSLO = "least_ttft", true, 400, time.Second
	for st, ms := range predictedMs {
		r.Prediction[st] = time.Duration(ms * float64(time.Millisecond))
	}
	s.ring.Emit(&r)
}

// predictedMs is emitPredicted's prediction, by stage.
var predictedMs = map[stages.Stage]float64{
	stages.Queue: 4, stages.Preparation: 1, stages.Prefill: 22, stages.FirstDecode: 3, stages.Unattributed: 1, stages.Transport: 0.05,
}

// browse runs headless Chromium on url and returns the DOM it dumped after
// the page's timers ran for budget (virtual time), plus its stderr. With
// screenshot set, it also saves a PNG there.
func browse(t *testing.T, url, screenshot string, budget time.Duration) (dom, stderr string) {
	t.Helper()
	chromium := testbin.Path(t, "chromium")
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0",
		"--window-size=1280,1000",
		"--virtual-time-budget=" + strconv.Itoa(int(budget/time.Millisecond)),
	}
	if screenshot != "" {
		args = append(args, "--screenshot="+screenshot)
	} else {
		args = append(args, "--dump-dom")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(args, url)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\nstderr:\n%s", err, tail(errb.String(), 3000))
	}
	return out.String(), errb.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var (
	rectRE      = regexp.MustCompile(`<rect [^>]*data-stage="([a-z_]+)" data-kind="([a-z]+)" data-ms="([0-9.]+)" data-width="([0-9.]+)"`)
	waterfallRE = regexp.MustCompile(`(?s)<svg id="waterfall"[^>]*>(.*?)</svg>`)
	metaRE      = regexp.MustCompile(`<span data-meta="([a-z_]+)">[^<]*<b>([^<]*)</b>`)
)

// TestPageInChromium drives the page in headless Chromium against real
// requests through the proxy and the reference engine: the page loads
// without script errors, lists the requests, and draws the selected
// request's waterfall with a bar per stage.
func TestPageInChromium(t *testing.T) {
	s := startStack(t)
	chat := `{"model":"ttftlens-ref","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"Tell me a story about a lighthouse"}]}`
	s.send(t, "web-plain", "/v1/chat/completions", chat)
	s.send(t, "web-queue", "/v1/chat/completions", chat, "X-Ttftlens-Fault", "queue_delay=40ms")
	s.send(t, "web-completion", "/v1/completions", `{"model":"ttftlens-ref","stream":true,"max_tokens":8,"prompt":"Once upon a time"}`)
	s.send(t, "web-bad", "/v1/chat/completions", `{"model":`)
	s.emitReasoning("web-reasoning")
	s.emitColdLoad("web-cold")
	s.emitPredicted("web-predicted", true)
	s.emitPredicted("web-predicted-cut", false)
	s.send(t, "web-last", "/v1/chat/completions", chat)

	ttftBars := []string{"gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport", "decode"}
	tests := []struct {
		name        string
		fragment    string // the request selected by the URL, "" = the page's default (newest)
		want        string // the request whose waterfall must be drawn
		bars        []string
		wantQueue   time.Duration
		firstAnswer bool // the first answer is marked apart from the first token
		inferred    bool // a bar is drawn as inferred
		predicted   bool // the predicted stages are drawn (predictedMs), and the predicted TTFT marked
	}{
		{"newest by default", "", "web-last", ttftBars, 0, false, false, false},
		{"selected by URL", "#web-queue", "web-queue", ttftBars, 40 * time.Millisecond, false, false, false},
		{"no first token", "#web-bad", "web-bad", []string{"gateway"}, 0, false, false, false},
		{"reasoning model", "#web-reasoning", "web-reasoning", append(ttftBars, "reasoning"), 0, true, false, false},
		{"a model load and an inferred queue", "#web-cold", "web-cold", append(ttftBars, "load"), 0, false, true, false},
		{"routed with a prediction", "#web-predicted", "web-predicted", ttftBars, 0, false, false, true},
		{"routed with a prediction, no first token", "#web-predicted-cut", "web-predicted-cut", []string{"gateway", "route", "queue", "upstream"}, 0, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dom, stderr := browse(t, "http://"+s.adminAddr+"/ui"+tt.fragment, "", 3*time.Second)
			if !strings.Contains(dom, `data-errors="0"`) {
				t.Fatalf("page reported script errors or did not run:\n%s\nchromium stderr:\n%s", errorsOf(dom), tail(stderr, 2000))
			}
			if !strings.Contains(dom, `data-ready="1"`) {
				t.Fatalf("page never rendered the list; stderr:\n%s", tail(stderr, 2000))
			}
			for _, id := range []string{"web-plain", "web-queue", "web-completion", "web-bad", "web-reasoning", "web-cold", "web-predicted", "web-predicted-cut", "web-last"} {
				if !strings.Contains(dom, `data-id="`+id+`"`) {
					t.Errorf("request %s missing from the tables", id)
				}
			}
			if !strings.Contains(dom, `data-waterfall="`+tt.want+`"`) || !strings.Contains(dom, `id="detail-id">`+tt.want+`<`) {
				t.Fatalf("waterfall not drawn for %s", tt.want)
			}
			m := waterfallRE.FindStringSubmatch(dom)
			if m == nil {
				t.Fatal("no waterfall svg in the DOM")
			}
			widths := map[string]float64{}    // the measured bars, by stage
			predicted := map[string]float64{} // the predicted ones' milliseconds
			for _, r := range rectRE.FindAllStringSubmatch(m[1], -1) {
				if r[2] == "predicted" {
					predicted[r[1]], _ = strconv.ParseFloat(r[3], 64)
					continue
				}
				widths[r[1]], _ = strconv.ParseFloat(r[4], 64)
			}
			checkPredicted(t, dom, m[1], predicted, tt.predicted)
			for _, st := range tt.bars {
				if _, ok := widths[st]; !ok {
					t.Errorf("waterfall has no bar for %s (bars: %v)", st, widths)
				}
			}
			if len(widths) > len(tt.bars)+1 { // + finish
				t.Errorf("waterfall bars %v, want %v", widths, tt.bars)
			}
			if slices.Contains(tt.bars, "prefill") && widths["prefill"] <= 0 {
				t.Errorf("prefill bar has width %v, want > 0", widths["prefill"])
			}
			if got := strings.Contains(m[1], `data-inferred="true"`) && strings.Contains(m[1], "queue (inferred)"); got != tt.inferred {
				t.Errorf("a bar drawn as inferred: %v, want %v", got, tt.inferred)
			}
			if got := strings.Contains(m[1], `data-mark="first_answer"`); got != tt.firstAnswer {
				t.Errorf("first answer marked: %v, want %v", got, tt.firstAnswer)
			}
			if tt.firstAnswer && !(widths["reasoning"] > widths["decode"]) {
				t.Errorf("reasoning bar %v not wider than decode %v", widths["reasoning"], widths["decode"])
			}
			if tt.wantQueue > 0 && widths["queue"] <= widths["gateway"] {
				t.Errorf("queue bar %v not wider than gateway %v despite a %v queue fault", widths["queue"], widths["gateway"], tt.wantQueue)
			}
			// The breakdown and the end reasons were drawn from the aggregates.
			for _, want := range []string{`data-reason="stop"`, `data-reason="invalid_request"`, `<svg id="breakdown"`} {
				if !strings.Contains(dom, want) {
					t.Errorf("DOM lacks %s", want)
				}
			}
			if c, want := strings.Count(dom, `data-stage="prefill"`), 2+min(strings.Count(strings.Join(tt.bars, ","), "prefill"), 1); c < want { // p50, p95, waterfall
				t.Errorf("prefill drawn %d times, want >= %d", c, want)
			}
		})
	}

	t.Run("screenshot", func(t *testing.T) {
		dir := t.TempDir()
		if d := os.Getenv("TTFTLENS_SCREENSHOT_DIR"); d != "" { // to look at it: never inside the repository
			dir = d
		}
		for file, fragment := range map[string]string{"ui.png": "#web-queue", "ui-predicted.png": "#web-predicted"} {
			png := filepath.Join(dir, file)
			start := time.Now()
			browse(t, "http://"+s.adminAddr+"/ui"+fragment, png, 3*time.Second)
			b, err := os.ReadFile(png)
			if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) || len(b) < 10000 {
				t.Fatalf("screenshot: %v (%d bytes)", err, len(b))
			}
			t.Logf("screenshot %s (%d bytes) in %v", png, len(b), time.Since(start).Round(time.Millisecond))
		}
	})
}

// checkPredicted asserts a waterfall's predicted bars (svg is its markup,
// predicted their milliseconds by stage): with want, one per stage from
// queue to transport, as emitPredicted predicted them, the predicted TTFT
// marked and the prediction in the meta line; without, none of these.
func checkPredicted(t *testing.T, dom, svg string, predicted map[string]float64, want bool) {
	t.Helper()
	marked := strings.Contains(svg, `data-mark="predicted_ttft"`)
	inMeta := strings.Contains(dom, `data-meta="predicted_ttft"`)
	if !want {
		if len(predicted) > 0 || marked || inMeta || strings.Contains(svg, `data-kind="predicted"`) {
			t.Errorf("a prediction drawn for a request without one: bars %v, marked %v, meta %v", predicted, marked, inMeta)
		}
		return
	}
	for st, ms := range predictedMs {
		if got, ok := predicted[st.String()]; !ok || got != ms {
			t.Errorf("predicted %s bar: %v (drawn %v), want %v ms", st, got, ok, ms)
		}
	}
	if len(predicted) != len(predictedMs) {
		t.Errorf("predicted bars %v, want %v", predicted, predictedMs)
	}
	if !marked || !inMeta {
		t.Errorf("predicted TTFT marked %v, in the meta line %v; want both", marked, inMeta)
	}
	got := map[string]string{}
	for _, m := range metaRE.FindAllStringSubmatch(dom, -1) {
		got[m[1]] = m[2]
	}
	wantMeta := map[string]string{"policy": "least_ttft", "ttft_slo": "1000 ms", "cached_tokens": "not reported / 400 expected"}
	if strings.Contains(svg, `data-mark="first_token"`) {
		wantMeta["cached_tokens"] = "384 reported / 400 expected"
		wantMeta["prediction_off"] = "queue 8.00 ms longer than predicted"
	}
	for k, v := range wantMeta {
		if got[k] != v {
			t.Errorf("meta %s %q, want %q (meta %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["prediction_off"]; ok != (wantMeta["prediction_off"] != "") {
		t.Errorf("meta prediction_off %q, want %q", got["prediction_off"], wantMeta["prediction_off"])
	}
}

func errorsOf(dom string) string {
	i := strings.Index(dom, `<pre id="js-errors"`)
	if i < 0 {
		return fmt.Sprintf("(no error element; body: %.500s)", dom)
	}
	return tail(dom[i:], 2000)
}
