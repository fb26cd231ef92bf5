package proxy

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

// startEngine runs the reference engine on loopback, taking faults from
// requests: the proxy decides whether they reach it.
func startEngine(t testing.TB, cfg refengine.Config) (*refengine.Server, string) {
	t.Helper()
	cfg.AllowFaults = true
	srv, err := refengine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, "http://" + ln.Addr().String()
}

// TestWithReferenceEngine puts the proxy in front of the real engine and
// checks the record against the engine's own ground truth: the engine
// durations the proxy attributes are the ones the engine measured.
func TestWithReferenceEngine(t *testing.T) {
	eng, url := startEngine(t, refengine.Config{})
	addr, sink, _ := startProxy(t, url, func(c *Config) { c.AllowFaults = true })
	tests := []struct {
		name   string
		body   string
		hdr    []string
		stream bool
		check  func(t *testing.T, r gotRecord)
	}{
		{"stream", `{"model":"ttftlens-ref","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`, nil, true, nil},
		{"non-stream with trailer", `{"model":"ttftlens-ref","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`, nil, false, nil},
		{"completions", `{"model":"ttftlens-ref","stream":true,"max_tokens":8,"prompt":"Once upon a time"}`, nil, true, nil},
		{"queue fault", `{"model":"ttftlens-ref","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"X-Ttftlens-Fault", "queue_delay=150ms"}, true, func(t *testing.T, r gotRecord) {
				if q := r.bd.Stages[stages.Queue]; q < 150*time.Millisecond {
					t.Errorf("queue stage %v, want >= 150ms", q)
				}
			}},
		{"slow tokenizer", `{"model":"ttftlens-ref","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"X-Ttftlens-Fault", "slow_tokenizer=120ms"}, true, func(t *testing.T, r gotRecord) {
				if p := r.bd.Stages[stages.Preparation]; p < 120*time.Millisecond {
					t.Errorf("preparation stage %v, want >= 120ms", p)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/chat/completions"
			if strings.Contains(tt.body, `"prompt"`) {
				path = "/v1/completions"
			}
			resp, body, err := postPath(t, addr, path, tt.body, tt.hdr...)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d err %v body %.300s", resp.StatusCode, err, body)
			}
			if strings.Contains(body, "server-timing") || resp.Header.Get("Server-Timing") != "" || resp.Trailer.Get("Server-Timing") != "" {
				t.Errorf("engine timing reached the client: %.300s", body)
			}
			r := sink.next(t)
			if r.Reason != endreason.Length && r.Reason != endreason.Stop {
				t.Fatalf("record %s/%s (%s)", r.Reason, r.Detail, r.Error)
			}
			if r.EngineSource != "server-timing" || !r.bd.OK || r.bd.Unsplit {
				t.Fatalf("engine report %q ok=%v unsplit=%v", r.EngineSource, r.bd.OK, r.bd.Unsplit)
			}
			truth, ok := eng.Truth(r.RequestID)
			if !ok {
				t.Fatalf("engine has no truth for %s", r.RequestID)
			}
			for _, c := range []struct {
				d    stages.EngineDur
				want time.Duration
			}{
				{stages.EngineQueue, truth.Queue}, {stages.EngineTokenize, truth.Tokenize}, {stages.EngineMedia, truth.Media},
				{stages.EnginePrefill, truth.Prefill}, {stages.EngineSync, truth.Sync}, {stages.EngineFirstDecode, truth.FirstDecode},
				{stages.EngineRecv, truth.Recv},
			} {
				got, ok := r.Timeline.Engine(c.d)
				if diff := (got - c.want).Abs(); !ok || diff > time.Microsecond {
					t.Errorf("engine %s: record %v, engine truth %v", c.d, got, c.want)
				}
			}
			// emit is reported on a stream, with its first token.
			if got, ok := r.Timeline.Engine(stages.EngineEmit); ok != tt.stream || (got-truth.Emit).Abs() > time.Microsecond {
				t.Errorf("engine emit: record %v (reported %v), engine truth %v", got, ok, truth.Emit)
			}
			if r.UpstreamConn == record.ConnNone {
				t.Error("no upstream_conn")
			}
			if r.bd.Inconsistent {
				t.Errorf("engine report flagged inconsistent: %+v", r.bd)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestFaultsOnlyWhenAllowed: a client's fault header reaches the engine
// only when the operator allows faults; otherwise the proxy strips it and
// the engine serves the request unharmed.
func TestFaultsOnlyWhenAllowed(t *testing.T) {
	eng, url := startEngine(t, refengine.Config{})
	for _, tc := range []struct {
		allow      bool
		wantStatus int
		wantFaults string
	}{
		{false, 200, ""},
		{true, 503, "http_error=503"},
	} {
		t.Run(fmt.Sprintf("allow=%v", tc.allow), func(t *testing.T) {
			addr, sink, _ := startProxy(t, url, func(c *Config) { c.AllowFaults = tc.allow })
			body := `{"model":"ttftlens-ref","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
			resp, _, err := post(t, addr, body, "X-Ttftlens-Fault", "http_error=503")
			if err != nil {
				t.Fatal(err)
			}
			r := sink.next(t)
			truth, ok := eng.Truth(r.RequestID)
			if !ok {
				t.Fatalf("engine has no truth for %s", r.RequestID)
			}
			if resp.StatusCode != tc.wantStatus || truth.Faults != tc.wantFaults {
				t.Errorf("status %d, engine faults %q; want %d, %q", resp.StatusCode, truth.Faults, tc.wantStatus, tc.wantFaults)
			}
		})
	}
}
