package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestRequestHeaders checks what the upstream receives: the request id, the
// trace context, no hop-by-hop headers, an uncompressed stream.
func TestRequestHeaders(t *testing.T) {
	const (
		parent    = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	)
	tests := []struct {
		name      string
		hdr       []string
		wantID    string // "" = generated
		wantTrace string // "" = started
		wantFlags byte
	}{
		{"client ids kept", []string{"X-Request-Id", "req-42", "traceparent", parent}, "req-42", "4bf92f3577b34da6a3ce929d0e0e4736", 0x01},
		{"caller did not sample", []string{"traceparent", unsampled}, "", "4bf92f3577b34da6a3ce929d0e0e4736", 0x00},
		{"insane id replaced", []string{"X-Request-Id", "bad id with spaces"}, "", "", 0x01},
		{"invalid traceparent restarted", []string{"traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-00"}, "", "", 0x01},
		{"a second traceparent and request id dropped", []string{"X-Request-Id", "req-42", "X-Request-Id", "req-43", "traceparent", parent, "traceparent", unsampled}, "req-42", "4bf92f3577b34da6a3ce929d0e0e4736", 0x01},
		{"hop-by-hop stripped", []string{"Connection", "X-Hop", "X-Hop", "1", "Keep-Alive", "timeout=5", "Accept-Encoding", "gzip"}, "", "", 0x01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
			addr, sink, _ := startProxy(t, up.url, nil)
			resp, _, err := post(t, addr, chatBody, tt.hdr...)
			if err != nil {
				t.Fatal(err)
			}
			got := up.request(t).req
			r := sink.next(t)
			for _, h := range []string{"X-Request-Id", "traceparent", "Accept-Encoding"} {
				if v := got.Header.Values(h); len(v) != 1 {
					t.Errorf("upstream %s: %q, want only ours", h, v)
				}
			}

			id := got.Header.Get("X-Request-Id")
			if tt.wantID != "" && id != tt.wantID {
				t.Errorf("upstream X-Request-Id %q, want %q", id, tt.wantID)
			}
			if !saneRequestID([]byte(id)) || id != r.RequestID || id != resp.Header.Get("X-Request-Id") {
				t.Errorf("request id upstream %q, record %q, client %q: want one sane id", id, r.RequestID, resp.Header.Get("X-Request-Id"))
			}
			tc, ok := parseTraceparent([]byte(got.Header.Get("traceparent")))
			if !ok {
				t.Fatalf("upstream traceparent %q invalid", got.Header.Get("traceparent"))
			}
			if tt.wantTrace != "" && tc.trace.String() != tt.wantTrace {
				t.Errorf("trace id %s, want continued %s", tc.trace, tt.wantTrace)
			}
			if tc.trace != r.TraceID || tc.parent != r.SpanID {
				t.Errorf("upstream trace %s/%s, record %s/%s", tc.trace, tc.parent, r.TraceID, r.SpanID)
			}
			if tc.flags != tt.wantFlags || r.TraceFlags != tt.wantFlags {
				t.Errorf("trace flags upstream %02x, record %02x, want %02x", tc.flags, r.TraceFlags, tt.wantFlags)
			}
			if tt.wantTrace != "" && r.ParentID.String() != "00f067aa0ba902b7" {
				t.Errorf("record parent span %s, want the caller's", r.ParentID)
			}
			for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection"} {
				if v := got.Header.Get(h); v != "" {
					t.Errorf("upstream got hop-by-hop header %s: %q", h, v)
				}
			}
			if ae := got.Header.Get("Accept-Encoding"); ae != "identity" {
				t.Errorf("upstream Accept-Encoding %q, want identity", ae)
			}
		})
	}
}

// TestOtherPaths checks that paths the proxy does not interpret pass through
// unchanged, and /health is answered locally without a record.
func TestOtherPaths(t *testing.T) {
	up := startUpstream(t, func(c *upConn) {
		c.whole(200, "application/json", fmt.Sprintf(`{"method":%q,"uri":%q,"body":%q}`, c.req.Method, c.req.RequestURI, c.body))
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/models", ""},
		{"POST", "/v1/embeddings?x=1&y=%20", `{"input":"a"}`},
		{"DELETE", "/anything/else", ""},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, strings.NewReader(tc.body))
		resp, err := testClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf(`{"method":%q,"uri":%q,"body":%q}`, tc.method, tc.path, tc.body)
		if string(b) != want {
			t.Errorf("%s %s: got %s, want %s", tc.method, tc.path, b, want)
		}
		r := sink.next(t)
		if r.Reason != endreason.Stop || r.Detail != endreason.DetailComplete || r.Path != strings.Split(tc.path, "?")[0] {
			t.Errorf("%s %s: record %s/%s path %q", tc.method, tc.path, r.Reason, r.Detail, r.Path)
		}
	}
	resp, err := testClient().Get("http://" + addr + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	sink.none(t, 0)
}

// TestKeepsServing sends bad upstream output and then good requests, many
// at once, through one proxy: each gets exactly one record, the good ones
// complete, and nothing leaks (TestMain's goleak).
func TestKeepsServing(t *testing.T) {
	up := startUpstream(t, func(c *upConn) {
		switch {
		case strings.Contains(c.body, "huge"):
			c.chunk("data: " + strings.Repeat("x", 256<<10)) // over the 64 KiB limit below
		case strings.Contains(c.body, "garbage"):
			c.chunk("\x00\x01garbage\n\ndata: {]\n\n")
		case strings.Contains(c.body, "reset"):
			c.content("a")
			c.reset()
		default:
			c.stream(5, 0)
		}
	})
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.MaxEventBytes = 64 << 10 })
	const n = 40
	kinds := []string{"huge", "garbage", "reset", "good"}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := kinds[i%len(kinds)]
			resp, body, err := post(t, addr, `{"model":"m","stream":true,"messages":[{"role":"user","content":"`+kind+`"}]}`)
			if kind == "good" && (err != nil || resp.StatusCode != 200 || !strings.Contains(body, "[DONE]")) {
				t.Errorf("good request failed: %v %d", err, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	counts := map[endreason.Detail]int{}
	for range n {
		counts[sink.next(t).Detail]++
	}
	sink.none(t, 100*time.Millisecond)
	want := map[endreason.Detail]int{
		endreason.DetailEventTooLarge:  n / 4,
		endreason.DetailMalformedEvent: n / 4,
		endreason.DetailResetMidStream: n / 4,
		endreason.DetailStop:           n / 4,
	}
	for d, c := range want {
		if counts[d] != c {
			t.Errorf("%s: %d records, want %d (all: %v)", d, counts[d], c, counts)
		}
	}
}
