package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// TestDeadlines: each deadline ends the request when the proxy's clock
// reaches it, not a nanosecond before, with its end reason; only content
// holds off the idle deadline. The clock is a fake the test moves; the
// upstream sends its part and then waits for the proxy to go.
func TestDeadlines(t *testing.T) {
	const nonContent = `data: {"choices":[{"index":0,"delta":{}}]}` + "\n\n"
	tests := []struct {
		name string
		cfg  func(*Config)
		// upstream is what the upstream sends before it falls silent.
		upstream func(c *upConn)
		// read: the client reads this before the clock moves ("": no
		// response yet).
		read string
		// midway, when set, is sent by the upstream when the clock is
		// halfway to the deadline, and read by the client.
		midway string
		at     time.Duration // the deadline, from receipt
		status int
		detail endreason.Detail
		cut    bool // the client's stream ends without its final chunk
	}{
		{"first-token deadline before headers", func(c *Config) { c.FirstTokenTimeout = 150 * time.Millisecond },
			func(c *upConn) {}, "", "", 150 * time.Millisecond, 504, endreason.DetailTTFTDeadline, false},
		{"first-token deadline in prefill", func(c *Config) { c.FirstTokenTimeout = 150 * time.Millisecond },
			func(c *upConn) { c.sse(); c.role() }, `"role"`, "", 150 * time.Millisecond, 200, endreason.DetailTTFTDeadline, true},
		{"total deadline mid-stream", func(c *Config) { c.TotalTimeout = 200 * time.Millisecond },
			func(c *upConn) { c.sse(); c.content("a") }, `"a"`, "", 200 * time.Millisecond, 200, endreason.DetailTotalDeadline, true},
		{"idle deadline", func(c *Config) { c.IdleTimeout = 150 * time.Millisecond },
			func(c *upConn) { c.sse(); c.content("a") }, `"a"`, "", 150 * time.Millisecond, 200, endreason.DetailIdleDeadline, true},
		{"idle deadline through comments", func(c *Config) { c.IdleTimeout = 150 * time.Millisecond },
			func(c *upConn) { c.sse(); c.content("a") }, `"a"`, ": ping\n\n", 150 * time.Millisecond, 200, endreason.DetailIdleDeadline, true},
		{"idle deadline through events without content", func(c *Config) { c.IdleTimeout = 150 * time.Millisecond },
			func(c *upConn) { c.sse(); c.content("a") }, `"a"`, nonContent, 150 * time.Millisecond, 200, endreason.DetailIdleDeadline, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &clock.Fake{}
			midway := make(chan struct{})
			up := startUpstream(t, func(c *upConn) {
				tt.upstream(c)
				if tt.midway != "" {
					<-midway
					c.chunk(tt.midway)
				}
				c.waitGone(5 * time.Second)
			})
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { tt.cfg(c); c.Clock = clk })
			_, br := rawClient(t, addr, chatBody)
			up.request(t)
			var resp *http.Response
			var seen strings.Builder // what the client read of the body
			if tt.read != "" {
				resp = readResponse(t, br)
				readBodyUntil(t, resp.Body, &seen, tt.read)
			}
			if tt.midway != "" {
				clk.Advance(tt.at / 2)
				midway <- struct{}{}
				readBodyUntil(t, resp.Body, &seen, strings.TrimSpace(strings.TrimPrefix(tt.midway, "data: ")))
			}
			// The deadline timer is the request's only timer.
			if d := clk.WaitArmed(1); d != tt.at-clk.Now() {
				t.Fatalf("deadline timer %v ahead at %v, want it at %v", d, clk.Now(), tt.at)
			}
			clk.Advance(tt.at - clk.Now() - 1)
			if d := clk.WaitArmed(1); d != 1 {
				t.Fatalf("a nanosecond before the deadline the timer is %v ahead", d)
			}
			clk.Advance(1)

			if resp == nil {
				resp = readResponse(t, br)
			}
			rest, err := io.ReadAll(resp.Body)
			seen.Write(rest)
			if resp.StatusCode != tt.status || isCut(err) != tt.cut {
				t.Errorf("status %d, read error %v; want %d, cut %v", resp.StatusCode, err, tt.status, tt.cut)
			}
			if tt.status != 200 && !isErrorObject(seen.String()) {
				t.Errorf("body %.300q is not an OpenAI error object", seen.String())
			}
			r := sink.next(t)
			if r.Reason != endreason.Deadline || r.Detail != tt.detail {
				t.Errorf("record %s/%s, want deadline/%s (error %q)", r.Reason, r.Detail, tt.detail, r.Error)
			}
		})
	}
}

// TestDefaultTotalDeadline: with no total timeout configured, a stream's
// life is still bounded: Normalize sets DefaultTotalTimeout, and a stream
// that is never idle (here: no idle deadline) ends at it with deadline /
// total_deadline.
func TestDefaultTotalDeadline(t *testing.T) {
	cfg := Config{Upstream: "http://127.0.0.1:1"}
	if err := cfg.Normalize(); err != nil || cfg.TotalTimeout <= 0 || cfg.TotalTimeout != DefaultTotalTimeout {
		t.Fatalf("default total timeout %v (%v), want DefaultTotalTimeout %v", cfg.TotalTimeout, err, DefaultTotalTimeout)
	}
	clk := &clock.Fake{}
	up := startUpstream(t, func(c *upConn) { c.sse(); c.content("x"); c.waitGone(5 * time.Second) })
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.IdleTimeout = -1; c.Clock = clk })
	_, br := rawClient(t, addr, chatBody)
	resp := readResponse(t, br)
	var seen strings.Builder
	readBodyUntil(t, resp.Body, &seen, `"x"`)
	clk.Advance(DefaultTotalTimeout - 1)
	if d := clk.WaitArmed(1); d != 1 {
		t.Fatalf("a nanosecond before the default total deadline the timer is %v ahead", d)
	}
	clk.Advance(1)
	if _, err := io.ReadAll(resp.Body); !isCut(err) {
		t.Errorf("client read error %v, want the stream cut", err)
	}
	if r := sink.next(t); r.Reason != endreason.Deadline || r.Detail != endreason.DetailTotalDeadline {
		t.Errorf("record %s/%s (%s), want deadline/total_deadline", r.Reason, r.Detail, r.Error)
	}
}

func readResponse(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// readBodyUntil reads body into seen until seen holds s.
func readBodyUntil(t *testing.T, body io.Reader, seen *strings.Builder, s string) {
	t.Helper()
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), s) {
		n, err := body.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("read %q, then %v; want %q", seen.String(), err, s)
		}
	}
}
