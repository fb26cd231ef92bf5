package refengine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// streamResult is a parsed streamed response.
type streamResult struct {
	resp     *http.Response
	headerAt time.Duration // client.Do returned (headers read)
	items    []sseItem
	err      error // read error other than EOF
	truth    Truth
}

func (r *streamResult) contents(t testing.TB) []sseItem {
	var out []sseItem
	for _, it := range r.items {
		if it.comment || it.data == "[DONE]" {
			continue
		}
		c := mustChunk(t, it.data)
		if len(c.Choices) == 1 && c.Choices[0].Delta != nil && c.Choices[0].Delta.Content != nil && c.Choices[0].Delta.Role == nil {
			out = append(out, it)
		}
	}
	return out
}

func (r *streamResult) done() bool {
	return len(r.items) > 0 && r.items[len(r.items)-1].data == "[DONE]"
}

func (r *streamResult) finishReason(t testing.TB) string {
	for _, it := range r.items {
		if it.comment || it.data == "[DONE]" {
			continue
		}
		c := mustChunk(t, it.data)
		if len(c.Choices) == 1 && c.Choices[0].FinishReason != nil {
			return *c.Choices[0].FinishReason
		}
	}
	return ""
}

var reqSeq int

// stream sends a streamed chat request with the given fault header and
// reads the whole response.
func stream(t *testing.T, e *testEngine, fault string, maxTokens int) *streamResult {
	t.Helper()
	reqSeq++
	id := t.Name() + "-" + string(rune('a'+reqSeq%26)) + time.Now().Format("150405.000000")
	body := chatBody("Write a long poem about the sea.", `"stream":true,"ignore_eos":true,"temperature":0,"max_tokens":`+itoa(maxTokens))
	start := time.Now()
	hdr := []string{"X-Request-Id", id}
	if fault != "" {
		hdr = append(hdr, FaultHeader, fault)
	}
	resp := e.post(t, context.Background(), "/v1/chat/completions", body, hdr...)
	r := &streamResult{resp: resp, headerAt: time.Since(start)}
	r.items, r.err = readSSE(resp.Body, start)
	resp.Body.Close()
	if !eventually(t, 5*time.Second, func() bool { _, ok := e.Truth(id); return ok }) {
		t.Fatalf("no truth for %s", id)
	}
	r.truth, _ = e.Truth(id)
	return r
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestFaults(t *testing.T) {
	e := startEngine(t, testConfig())
	tests := []struct {
		fault string
		max   int
		check func(t *testing.T, r *streamResult)
	}{
		{"queue_delay=150ms", 4, func(t *testing.T, r *streamResult) {
			if r.truth.Queue < 150*time.Millisecond || !r.done() {
				t.Errorf("queue %v done %v", r.truth.Queue, r.done())
			}
			if r.headerAt > 120*time.Millisecond {
				t.Errorf("headers took %v: they should be sent before queueing", r.headerAt)
			}
		}},
		{"slow_tokenizer=120ms", 4, func(t *testing.T, r *streamResult) {
			if r.truth.Tokenize < 120*time.Millisecond {
				t.Errorf("tokenize %v", r.truth.Tokenize)
			}
		}},
		{"slow_media=120ms", 4, func(t *testing.T, r *streamResult) {
			if r.truth.Media < 120*time.Millisecond {
				t.Errorf("media %v", r.truth.Media)
			}
		}},
		{"long_prompt=600", 2, func(t *testing.T, r *streamResult) {
			if r.truth.PromptTokens < 600 || r.truth.CachedTokens != 0 {
				t.Errorf("prompt tokens %d cached %d", r.truth.PromptTokens, r.truth.CachedTokens)
			}
		}},
		{"buffered", 40, func(t *testing.T, r *streamResult) {
			c := r.contents(t)
			if len(c) < 5 || !r.done() {
				t.Fatalf("contents %d done %v", len(c), r.done())
			}
			spread := r.items[len(r.items)-1].at - c[0].at
			decode := r.truth.E2E - r.truth.FirstTokenSampled
			if decode < 2*spread {
				t.Errorf("buffered stream spread over %v (decode took %v)", spread, decode)
			}
			if c[0].at < decode {
				t.Errorf("first content at %v, before decode ended (%v)", c[0].at, decode)
			}
		}},
		{"stall=2:300ms", 6, func(t *testing.T, r *streamResult) {
			var maxGap time.Duration
			for i := 1; i < len(r.items); i++ {
				maxGap = max(maxGap, r.items[i].at-r.items[i-1].at)
			}
			if maxGap < 300*time.Millisecond || !r.done() {
				t.Errorf("max gap %v done %v", maxGap, r.done())
			}
		}},
		{"reset_after=3", 20, func(t *testing.T, r *streamResult) {
			if r.err == nil || r.done() {
				t.Errorf("read err %v, done %v: want a reset", r.err, r.done())
			}
			if r.truth.Detail != "reset_mid_stream" {
				t.Errorf("truth %+v", r.truth)
			}
		}},
		{"close_after=3", 20, func(t *testing.T, r *streamResult) {
			if r.err != nil || r.done() || r.finishReason(t) != "" {
				t.Errorf("err %v done %v finish %q: want a clean end without finish", r.err, r.done(), r.finishReason(t))
			}
			if r.truth.Detail != "close_without_done" || r.truth.CompletionTokens != 3 {
				t.Errorf("truth %+v", r.truth)
			}
		}},
		{"http_error=503", 4, func(t *testing.T, r *streamResult) {
			if r.resp.StatusCode != 503 || !strings.HasPrefix(r.resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("status %d %s", r.resp.StatusCode, r.resp.Header.Get("Content-Type"))
			}
		}},
		{"error_after=2", 20, func(t *testing.T, r *streamResult) {
			last := r.items[len(r.items)-1]
			c := mustChunk(t, last.data)
			if c.Error == nil || c.Error.Message == "" || r.done() || r.err != nil {
				t.Errorf("last item %q, done %v, err %v", last.data, r.done(), r.err)
			}
			if r.truth.FinishReason != "error" || r.truth.Detail != "error_event" {
				t.Errorf("truth %+v", r.truth)
			}
		}},
		{"content_filter=2", 20, func(t *testing.T, r *streamResult) {
			if r.finishReason(t) != "content_filter" || !r.done() || len(r.contents(t)) > 2 {
				t.Errorf("finish %q done %v contents %d", r.finishReason(t), r.done(), len(r.contents(t)))
			}
		}},
		{"hold_headers,queue_delay=150ms", 4, func(t *testing.T, r *streamResult) {
			st := r.resp.Header.Get("Server-Timing")
			if r.headerAt < 150*time.Millisecond || st == "" {
				t.Fatalf("headers at %v, Server-Timing %q", r.headerAt, st)
			}
			timing := parseServerTiming(t, st)
			if timing["queue"] < 150*time.Millisecond || len(timing) != 8 {
				t.Errorf("Server-Timing %q", st)
			}
			var comment string
			for _, it := range r.items {
				if it.comment && strings.HasPrefix(it.data, "server-timing ") {
					comment = strings.TrimPrefix(it.data, "server-timing ")
				}
			}
			if comment != st {
				t.Errorf("the comment says %q, the header %q: want the same values", comment, st)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			r := stream(t, e, tc.fault, tc.max)
			if r.truth.Faults == "" {
				t.Errorf("truth has no faults: %+v", r.truth)
			}
			tc.check(t, r)
		})
	}
}

func TestServerWideFault(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = "queue_delay=100ms"
	e := startEngine(t, cfg)
	r := stream(t, e, "slow_tokenizer=10ms", 2)
	if r.truth.Queue < 100*time.Millisecond || r.truth.Tokenize < 10*time.Millisecond {
		t.Errorf("truth %+v", r.truth)
	}
	if _, err := New(Config{Faults: "bogus"}); err == nil {
		t.Error("New accepted an unknown fault")
	}
}

// TestSetFaults: SetFaults replaces the server-wide faults for the
// requests that come after it; a spec that does not parse changes nothing.
func TestSetFaults(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = "queue_delay=100ms"
	e := startEngine(t, cfg)
	if err := e.SetFaults("slow_tokenizer=10ms"); err != nil {
		t.Fatal(err)
	}
	if r := stream(t, e, "", 2); r.truth.Faults != "slow_tokenizer=10ms" || r.truth.Queue >= 100*time.Millisecond {
		t.Errorf("after SetFaults: faults %q, queue %v", r.truth.Faults, r.truth.Queue)
	}
	if err := e.SetFaults("bogus"); err == nil {
		t.Error("SetFaults accepted an unknown fault")
	}
	if err := e.SetFaults(""); err != nil {
		t.Fatal(err)
	}
	if r := stream(t, e, "", 2); r.truth.Faults != "" {
		t.Errorf("after SetFaults(\"\"): faults %q", r.truth.Faults)
	}
}

// TestRequestFaultsOnlyWhenAllowed: a request's fault header is ignored
// unless the configuration allows it; the server-wide faults apply either
// way.
func TestRequestFaultsOnlyWhenAllowed(t *testing.T) {
	for _, tc := range []struct {
		allow      bool
		wantStatus int
		wantFaults string
	}{
		{false, http.StatusOK, "content_filter=0"},
		{true, http.StatusServiceUnavailable, "http_error=503,content_filter=0"},
	} {
		t.Run(fmt.Sprintf("allow=%v", tc.allow), func(t *testing.T) {
			cfg := testConfig()
			cfg.AllowFaults, cfg.Faults = tc.allow, "content_filter=0"
			r := stream(t, startEngine(t, cfg), "http_error=503", 4)
			if r.resp.StatusCode != tc.wantStatus || r.truth.Faults != tc.wantFaults {
				t.Errorf("status %d, faults %q; want %d, %q", r.resp.StatusCode, r.truth.Faults, tc.wantStatus, tc.wantFaults)
			}
		})
	}
}

// TestSlowPrefill: a server-wide slow_prefill makes every prompt's prefill
// slower than the same prompt's on an engine without it, and the truth
// names the fault.
func TestSlowPrefill(t *testing.T) {
	slowCfg := testConfig()
	slowCfg.Faults = "slow_prefill=4"
	base := stream(t, startEngine(t, testConfig()), "long_prompt=200", 2)
	slow := stream(t, startEngine(t, slowCfg), "long_prompt=200", 2)
	if slow.truth.Prefill <= base.truth.Prefill || !strings.Contains(slow.truth.Faults, "slow_prefill=4") {
		t.Errorf("prefill: base %v, slow_prefill=4 %v (faults %q)", base.truth.Prefill, slow.truth.Prefill, slow.truth.Faults)
	}
	t.Logf("prefill: base %v, slow_prefill=4 %v", base.truth.Prefill, slow.truth.Prefill)
}

func TestStragglerSync(t *testing.T) {
	cfg := testConfig()
	cfg.Ranks = 2
	e := startEngine(t, cfg)
	base := stream(t, e, "long_prompt=200", 2)
	slow := stream(t, e, "long_prompt=200,straggler=1:20ms", 2)
	// Rank 1 sleeps 20ms before each of six attention barriers of the
	// one prefill step, so rank 0 waits there at least about that long.
	// (Other loads on the machine make the baseline noisy: no upper bound.)
	if slow.truth.Sync < 90*time.Millisecond || slow.truth.Sync > slow.truth.Prefill {
		t.Errorf("sync: base %v, straggler %v (prefill %v)", base.truth.Sync, slow.truth.Sync, slow.truth.Prefill)
	}
	t.Logf("sync: base %v (prefill %v), straggler %v (prefill %v)", base.truth.Sync, base.truth.Prefill, slow.truth.Sync, slow.truth.Prefill)
}

// TestClientLeftIgnored: with keep_decoding the engine decodes to the end
// after its client left; with ignore_disconnect=K it generates K more
// tokens, then aborts the request as if it had just noticed. Both count
// the tokens generated after the client left, per request and in total.
func TestClientLeftIgnored(t *testing.T) {
	for _, tc := range []struct {
		fault   string
		finish  string
		after   int // tokens after the client left; 0: some
		aborted int64
	}{
		{"keep_decoding", "length", 0, 0},
		{"ignore_disconnect=7", "abort", 7, 1},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			e := startEngine(t, testConfig())
			ctx, cancel := context.WithCancel(context.Background())
			resp := e.post(t, ctx, "/v1/chat/completions",
				chatBody("hi", `"stream":true,"ignore_eos":true,"max_tokens":200`), "X-Request-Id", "left-1", FaultHeader, tc.fault)
			buf := make([]byte, 1)
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatal(err)
			}
			cancel()
			resp.Body.Close()
			var tr Truth
			if !eventually(t, 10*time.Second, func() bool { var ok bool; tr, ok = e.Truth("left-1"); return ok }) {
				t.Fatal("no truth")
			}
			aborted, after := e.Counters()
			if !tr.ClientGone || tr.FinishReason != tc.finish || tr.TokensAfterClientLeft == 0 || after != int64(tr.TokensAfterClientLeft) ||
				tc.after > 0 && tr.TokensAfterClientLeft != tc.after || aborted != tc.aborted {
				t.Errorf("truth %+v; counters: %d aborted, %d tokens after the client left; want finish %s, %d tokens after (0: some), %d aborted",
					tr, aborted, after, tc.finish, tc.after, tc.aborted)
			}
		})
	}
}

func TestTokenizerPoolQueues(t *testing.T) {
	cfg := testConfig()
	cfg.TokenizerWorkers = 1
	e := startEngine(t, cfg)
	done := make(chan Truth, 2)
	for i := range 2 {
		go func() {
			id := "tokq-" + itoa(i)
			resp := e.post(t, context.Background(), "/v1/completions", `{"prompt":"hello","max_tokens":1}`, "X-Request-Id", id, FaultHeader, "slow_tokenizer=150ms")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			tr, _ := e.Truth(id)
			done <- tr
		}()
	}
	a, b := <-done, <-done
	if max(a.Tokenize, b.Tokenize) < 290*time.Millisecond {
		t.Errorf("tokenize %v and %v: the second should include the wait for the only worker", a.Tokenize, b.Tokenize)
	}
}
