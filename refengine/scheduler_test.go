package refengine

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/refengine/model"
)

func TestAbortOnDisconnectFreesBlocks(t *testing.T) {
	e := startEngine(t, testConfig())
	_, total := e.KVBlocks()
	ctx, cancel := context.WithCancel(context.Background())
	resp := e.post(t, ctx, "/v1/chat/completions",
		chatBody("a long story please", `"stream":true,"ignore_eos":true,"max_tokens":1500`), "X-Request-Id", "abort-1")
	// Read until the first content chunk: the request is decoding.
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), `"content":"`) || strings.Count(got.String(), "data:") < 3 {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(buf[:n])
	}
	if free, _ := e.KVBlocks(); free == total {
		t.Fatal("no blocks in use while decoding")
	}
	cancel()
	resp.Body.Close()
	if !eventually(t, 5*time.Second, func() bool { free, _ := e.KVBlocks(); return free == total }) {
		free, _ := e.KVBlocks()
		t.Fatalf("blocks not freed: %d of %d free", free, total)
	}
	if !eventually(t, 5*time.Second, func() bool { a, _ := e.Counters(); return a == 1 }) {
		a, _ := e.Counters()
		t.Fatalf("aborted = %d", a)
	}
	// Within one step: at most the step in flight when the client left
	// produced a token.
	if _, after := e.Counters(); after > 1 {
		t.Errorf("%d tokens generated after the client left", after)
	}
	tr, ok := e.Truth("abort-1")
	if !ok || tr.FinishReason != "abort" || !tr.ClientGone || tr.Detail != "client_cancel" {
		t.Errorf("truth %+v", tr)
	}
	x := scrape(t, e)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vllm:request_success_total", []string{"finished_reason", "abort"}, 1},
		{"ttftlens_engine_aborted_requests_total", nil, 1},
		{"vllm:num_requests_running", nil, 0},
	} {
		if got := x.value(t, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestAbortWhileQueued: a client that leaves while its request is queued
// (the client read the queued progress comment) aborts it there.
func TestAbortWhileQueued(t *testing.T) {
	e := startEngine(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	resp := e.post(t, ctx, "/v1/chat/completions", chatBody("hi", `"stream":true`), "X-Request-Id", "abortq-1", FaultHeader, "queue_delay=5s")
	queued := &signalOn{r: resp.Body, s: ": ttftlens-phase queued", seen: make(chan struct{})}
	for buf := make([]byte, 512); ; {
		if _, err := queued.Read(buf); err != nil {
			t.Fatalf("the stream ended before the queued comment: %v", err)
		}
		if queued.done {
			break
		}
	}
	cancel()
	resp.Body.Close()
	var tr Truth
	if !eventually(t, 3*time.Second, func() bool { var ok bool; tr, ok = e.Truth("abortq-1"); return ok }) {
		t.Fatal("no truth")
	}
	if tr.FinishReason != "abort" || tr.Queue != 0 {
		t.Errorf("truth %+v", tr)
	}
	if !eventually(t, 2*time.Second, func() bool { return scrape(t, e).value(t, "vllm:num_requests_waiting") == 0 }) {
		t.Errorf("waiting gauge %v", scrape(t, e).value(t, "vllm:num_requests_waiting"))
	}
}

// complete runs a non-streamed greedy completion and returns its text and
// usage.
func complete(t *testing.T, e *testEngine, prompt string, maxTokens int, id string) (string, usage) {
	t.Helper()
	pb, _ := json.Marshal(prompt)
	resp := e.post(t, context.Background(), "/v1/completions",
		`{"prompt":`+string(pb)+`,"max_tokens":`+itoa(maxTokens)+`,"temperature":0,"ignore_eos":true}`, "X-Request-Id", id)
	defer resp.Body.Close()
	b := readAll(t, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != maxTokens {
		t.Errorf("%s: finish %q, %d tokens", id, out.Choices[0].FinishReason, out.Usage.CompletionTokens)
	}
	return out.Choices[0].Text, out.Usage
}

func TestPreemptionCompletesAll(t *testing.T) {
	cfg := testConfig()
	cfg.KVBlocks = 24 // 384 token positions
	cfg.MaxRunning = 8
	e := startEngine(t, cfg)
	const n, maxTokens = 6, 64
	prompts := make([]string, n)
	want := make([]string, n)
	for i := range prompts {
		prompts[i] = strings.Repeat(string(rune('a'+i)), 3) + " went to the market to buy some bread"
		want[i], _ = complete(t, e, prompts[i], maxTokens, "seq-"+itoa(i)) // alone: no preemption
	}
	var wg sync.WaitGroup
	got := make([]string, n)
	for i := range prompts {
		wg.Go(func() { got[i], _ = complete(t, e, prompts[i], maxTokens, "par-"+itoa(i)) })
	}
	wg.Wait()
	preemptions := scrape(t, e).value(t, "vllm:num_preemptions_total")
	if preemptions == 0 {
		t.Fatal("no preemption happened; the test does not test anything")
	}
	preempted := 0
	for i := range prompts {
		tr, _ := e.Truth("par-" + itoa(i))
		preempted += tr.Preemptions
		if got[i] != want[i] {
			t.Errorf("request %d (preemptions %d): output differs\n got %q\nwant %q", i, tr.Preemptions, got[i], want[i])
		}
	}
	if !eventually(t, 2*time.Second, func() bool { free, total := e.KVBlocks(); return free == total }) {
		free, total := e.KVBlocks()
		t.Errorf("%d of %d blocks free after all requests", free, total)
	}
	t.Logf("preemptions: %d (metric %v)", preempted, preemptions)
}

func TestPrefixCacheHit(t *testing.T) {
	e := startEngine(t, testConfig())
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog while the cat sleeps. ", 40)
	_, u1 := complete(t, e, prompt, 1, "pc-1")
	_, u2 := complete(t, e, prompt, 1, "pc-2")
	t1, _ := e.Truth("pc-1")
	t2, _ := e.Truth("pc-2")
	if u1.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("first request cached %d", u1.PromptTokensDetails.CachedTokens)
	}
	if u2.PromptTokensDetails.CachedTokens < u2.PromptTokens-16 || u2.PromptTokensDetails.CachedTokens%16 != 0 {
		t.Errorf("second request: cached %d of %d", u2.PromptTokensDetails.CachedTokens, u2.PromptTokens)
	}
	if t2.CachedTokens != u2.PromptTokensDetails.CachedTokens {
		t.Errorf("truth cached %d vs usage %d", t2.CachedTokens, u2.PromptTokensDetails.CachedTokens)
	}
	if t2.Prefill*3 > t1.Prefill {
		t.Errorf("prefill with cache %v, without %v (prompt %d tokens)", t2.Prefill, t1.Prefill, u1.PromptTokens)
	}
	t.Logf("prompt %d tokens: prefill %v cold, %v with %d cached", u1.PromptTokens, t1.Prefill, t2.Prefill, u2.PromptTokensDetails.CachedTokens)
}

// A long prefill is chunked and shares steps with a running decode, so the
// decode keeps producing tokens during it.
func TestChunkedPrefillSharesSteps(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatchTokens = 64
	e := startEngine(t, cfg)
	start := time.Now()
	resp := e.post(t, context.Background(), "/v1/chat/completions",
		chatBody("count", `"stream":true,"ignore_eos":true,"max_tokens":400,"temperature":0`), "X-Request-Id", "decoder")
	defer resp.Body.Close()
	type res struct {
		items []sseItem
		err   error
	}
	ch := make(chan res, 1)
	body := &signalOn{r: resp.Body, s: `"content"`, seen: make(chan struct{})}
	go func() {
		items, err := readSSE(body, start)
		ch <- res{items, err}
	}()
	<-body.seen // the decoder is decoding
	_, u := complete(t, e, strings.Repeat("Chunked prefill keeps decoders alive. ", 40), 1, "prefiller")
	longEnd := time.Since(start)
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	tr, _ := e.Truth("prefiller")
	steps := (u.PromptTokens + cfg.MaxBatchTokens - 1) / cfg.MaxBatchTokens
	// Count decode events that arrived during the prefill window.
	from, to := longEnd-tr.E2E+tr.Queue+tr.Tokenize, longEnd-tr.E2E+tr.Queue+tr.Tokenize+tr.Prefill
	during := 0
	for _, it := range r.items {
		if it.at >= from && it.at <= to {
			during++
		}
	}
	if during < steps/3 {
		t.Errorf("only %d decode events during a %v prefill of %d tokens (%d chunks)", during, tr.Prefill, u.PromptTokens, steps)
	}
	t.Logf("%d decode events during a %v prefill of %d tokens (%d chunks)", during, tr.Prefill, u.PromptTokens, steps)
}

// A request admitted while another of its prompt is still in its chunks
// finds the chunks computed so far in the prefix cache, not nothing: with
// 64 tokens a step, the second request is admitted in the step that
// computes the first's last chunk (the budget the chunk leaves), after all
// its other chunks were published.
func TestChunkedPrefillIsFoundMidway(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatchTokens = 64
	e := startEngine(t, cfg)
	prompt := strings.Repeat("A prompt found before its prefill ends. ", 20)
	pb, _ := json.Marshal(prompt)
	resp := e.post(t, context.Background(), "/v1/completions",
		`{"prompt":`+string(pb)+`,"max_tokens":1,"stream":true,"ignore_eos":true}`,
		"X-Request-Id", "first", FaultHeader, "slow_prefill=20")
	defer resp.Body.Close()
	body := &signalOn{r: resp.Body, s: ": ttftlens-phase prefill", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, body); done <- err }()
	<-body.seen // the first request's prefill began
	_, u := complete(t, e, prompt, 1, "second")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	last := u.PromptTokens % cfg.MaxBatchTokens
	if last <= model.BlockSize {
		t.Fatalf("prompt of %d tokens: its last chunk (%d) must be longer than a block", u.PromptTokens, last)
	}
	// Published before the last chunk: every full block of the chunks
	// before it. Without publishing mid-prefill the second finds nothing;
	// admitted after the first's prefill, it finds all but the last block.
	want := (u.PromptTokens - last) / model.BlockSize * model.BlockSize
	switch got := u.PromptTokensDetails.CachedTokens; {
	case got == (u.PromptTokens-1)/model.BlockSize*model.BlockSize:
		t.Fatalf("second request cached all %d of %d prompt tokens: it came after the first's prefill ended, and the test tests nothing", got, u.PromptTokens)
	case got != want:
		t.Errorf("second request cached %d of %d prompt tokens, want %d (the first's chunks before its last)", got, u.PromptTokens, want)
	}
	t.Logf("prompt %d tokens, last chunk %d, cached %d", u.PromptTokens, last, u.PromptTokensDetails.CachedTokens)
}

// Close ends in-flight streams and leaves no goroutine behind (goleak in
// TestMain checks the latter).
func TestServeAndCloseWithStreamInFlight(t *testing.T) {
	s, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
		strings.NewReader(chatBody("go on", `"stream":true,"ignore_eos":true,"max_tokens":1500`)))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung")
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestPrefillStretch: slow_prefill=F stretches a step by F−1 times the
// share of its time its faulted prompt tokens took, and no more.
func TestPrefillStretch(t *testing.T) {
	type entry struct {
		tokens    int
		factor    float64
		prefilled bool
	}
	const d = 120 * time.Millisecond
	tests := []struct {
		name    string
		entries []entry
		want    time.Duration
	}{
		{"no fault", []entry{{tokens: 64}, {tokens: 1, prefilled: true}}, 0},
		{"all prompt tokens, twice as slow", []entry{{tokens: 64, factor: 2}}, d},
		{"a decode beside the slow prompt", []entry{{tokens: 3, factor: 3}, {tokens: 1, prefilled: true}}, d * 6 / 4},
		{"the faulted request decoding", []entry{{tokens: 1, factor: 4, prefilled: true}}, 0},
		{"a factor of 1", []entry{{tokens: 8, factor: 1}}, 0},
		{"two prompts, one slow", []entry{{tokens: 30, factor: 2}, {tokens: 90}}, d / 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &scheduler{}
			for _, e := range tc.entries {
				r := newRequest()
				r.faults = noFaults()
				r.faults.SlowPrefill = e.factor
				r.prefilled = e.prefilled
				s.batch = append(s.batch, r)
				s.entries = append(s.entries, model.StepEntry{Tokens: make([]int, e.tokens)})
			}
			if got := s.prefillStretch(d); got != tc.want {
				t.Errorf("stretch %v, want %v", got, tc.want)
			}
		})
	}
}
