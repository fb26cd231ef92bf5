package proxy

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestEngineShutdownIsNoFailure: an engine that shuts down gracefully
// says so (`Connection: close`) on the streams it then cuts with a FIN and
// on the 503s it answers while it drains; those do not count towards
// passive ejection, so a one-upstream pool is not out of rotation when the
// engine comes back. The same cut or 503 without the word is a failure.
func TestEngineShutdownIsNoFailure(t *testing.T) {
	const drainBody = `{"error":{"message":"shutting down"}}`
	cut := func(closing bool) func(c *upConn) {
		return func(c *upConn) {
			var extra []string
			if closing {
				extra = append(extra, "Connection: close")
			}
			c.headers(200, "text/event-stream", extra...)
			c.role()
			c.content("partial")
			_ = c.conn.Close() // a FIN inside the chunked body
		}
	}
	refuse := func(closing bool) func(c *upConn) {
		return func(c *upConn) {
			var extra []string
			if closing {
				extra = append(extra, "Connection: close")
			}
			c.headers(503, "application/json", extra...)
			c.chunk(drainBody)
			c.end()
			if closing {
				_ = c.conn.Close()
			}
		}
	}
	tests := []struct {
		name    string
		failing []func(c *upConn) // the first requests' answers; then the engine serves again
		want    []endreason.Detail
		ejected bool
	}{
		{"streams cut after Connection: close, then 503s while draining",
			[]func(c *upConn){cut(true), cut(true), refuse(true)},
			[]endreason.Detail{endreason.DetailTruncatedBody, endreason.DetailTruncatedBody, endreason.DetailUpstream5xx}, false},
		{"streams cut without a word",
			[]func(c *upConn){cut(false), cut(false), cut(false)},
			[]endreason.Detail{endreason.DetailTruncatedBody, endreason.DetailTruncatedBody, endreason.DetailTruncatedBody}, true},
		{"503s on a kept-alive connection",
			[]func(c *upConn){refuse(false), refuse(false), refuse(false)},
			[]endreason.Detail{endreason.DetailUpstream5xx, endreason.DetailUpstream5xx, endreason.DetailUpstream5xx}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			up := startUpstream(t, func(c *upConn) {
				if i := int(n.Add(1)) - 1; i < len(tc.failing) {
					tc.failing[i](c)
					return
				}
				c.stream(1, 0)
			})
			yaml := `
routes: [{model: m, pool: one}]
pools:
  - {name: one, upstreams: [UP_A], ejection: {consecutive_failures: 3, duration: 1h}}
`
			addr, sink, _ := startGateway(t, yaml, map[string]string{"UP_A": up.url})
			for i, want := range tc.want {
				_, _, _ = post(t, addr, chat("m", "")) // a cut stream is a client read error too
				if r := sink.next(t); r.Detail != want {
					t.Fatalf("request %d: %s/%s, want %s", i, r.Reason, r.Detail, want)
				}
			}
			resp, body, err := post(t, addr, chat("m", ""))
			r := sink.next(t)
			if ejected := r.Detail == endreason.DetailNoHealthy; ejected != tc.ejected {
				t.Fatalf("after the engine's failures: %v %d %s, record %s/%s; want ejected %v",
					err, resp.StatusCode, strings.TrimSpace(body), r.Reason, r.Detail, tc.ejected)
			}
		})
	}
}
