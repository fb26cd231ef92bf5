package proxy

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestUpstreamLimits sends upstream responses around the proxy's limits
// (response headers under and over --max-upstream-header-bytes, a
// non-streamed body over --max-body-bytes) and malformed headers, and
// tries an upstream that refuses connections. A refused response gets the
// client an OpenAI error whose code is the record's detail and which quotes
// nothing the upstream sent (its headers carry a cookie) nor the upstream's
// address; the record says why, and names the address it could not reach.
func TestUpstreamLimits(t *testing.T) {
	const cookie = "c00kie-5ecret-value"
	withHeaders := func(filler int) func(c *upConn) {
		return func(c *upConn) {
			c.headers(200, "text/event-stream", "Set-Cookie: session="+cookie+"; Path=/", "X-Filler: "+strings.Repeat("x", filler))
			c.stream(1, 0)
		}
	}
	malformed := func(c *upConn) {
		c.write("HTTP/1.1 200 OK\r\nSet-Cookie: session=" + cookie + "\r\nContent-Type text/event-stream\r\n\r\n")
	}
	const wholeRequest = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	bigBody := func(c *upConn) {
		c.whole(200, "application/json", `{"choices":[{"index":0,"message":{"content":"`+strings.Repeat("x", 4<<10)+`"},"finish_reason":"stop"}]}`)
	}
	withTrailers := func(fields string) func(c *upConn) {
		return func(c *upConn) {
			c.sse()
			c.role()
			c.content("t")
			c.finish("stop")
			c.done()
			c.write("0\r\n" + fields + "\r\n")
		}
	}
	badChunk := func(c *upConn) {
		c.sse()
		c.write("zz\r\ndata: {}\n\n\r\n")
	}
	tests := []struct {
		name   string
		script func(c *upConn)
		cfg    func(*Config)
		body   string
		status int
		reason endreason.Reason
		detail endreason.Detail
	}{
		{"headers of 8 KiB, under the default", withHeaders(8 << 10), nil, chatBody,
			200, endreason.Stop, endreason.DetailStop},
		{"headers of 20 KiB, over the default", withHeaders(20 << 10), nil, chatBody,
			502, endreason.WorkerFailure, endreason.DetailHeadersTooLarge},
		{"headers of 6 KiB, over a limit of 4 KiB", withHeaders(6 << 10), func(c *Config) { c.MaxUpstreamHeaderBytes = 4 << 10 }, chatBody,
			502, endreason.WorkerFailure, endreason.DetailHeadersTooLarge},
		{"trailers of 3 KiB, read whole", withTrailers("Server-Timing: x;dur=1\r\nX-Filler: " + strings.Repeat("x", 3<<10) + "\r\n"), nil, chatBody,
			200, endreason.Stop, endreason.DetailStop},
		{"trailers of 64 KiB, over what is kept", withTrailers("X-Filler: " + strings.Repeat("x", 64<<10) + "\r\nServer-Timing: x;dur=1\r\n"), nil, chatBody,
			200, endreason.Stop, endreason.DetailStop},
		{"malformed chunked framing", badChunk, nil, chatBody,
			502, endreason.UpstreamDisconnect, endreason.DetailReadFailed},
		{"malformed headers", malformed, nil, chatBody,
			502, endreason.WorkerFailure, endreason.DetailMalformedHeaders},
		{"malformed status line", func(c *upConn) { c.write("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n") }, nil, chatBody,
			502, endreason.WorkerFailure, endreason.DetailMalformedHeaders},
		{"upstream refusing connections", nil, nil, chatBody,
			502, endreason.WorkerFailure, endreason.DetailConnectFailed},
		{"non-streamed body over the limit", bigBody, func(c *Config) { c.MaxBodyBytes = 1 << 10 }, wholeRequest,
			502, endreason.WorkerFailure, endreason.DetailUpstreamBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var upURL string
			if tt.script != nil {
				upURL = startUpstream(t, tt.script).url
			} else {
				upURL = deadURL(t)
			}
			upAddr := strings.TrimPrefix(upURL, "http://")
			addr, sink, _ := startProxy(t, upURL, tt.cfg)
			resp, body, err := post(t, addr, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d (body %.300q)", resp.StatusCode, tt.status, body)
			}
			if tt.status >= 400 && !isErrorObject(body) {
				t.Errorf("body %.300q is not an OpenAI error object", body)
			}
			if strings.Contains(body, cookie) || strings.Contains(body, "xxxxxxxx") {
				t.Errorf("the client's body quotes upstream bytes: %.300q", body)
			}
			if strings.Contains(body, upAddr) {
				t.Errorf("the client's body names the upstream's address %s: %.300q", upAddr, body)
			}
			r := sink.next(t)
			if r.Reason != tt.reason || r.Detail != tt.detail {
				t.Errorf("record %s/%s, want %s/%s (error %q)", r.Reason, r.Detail, tt.reason, tt.detail, r.Error)
			}
			if tt.status >= 400 {
				if code := errorCode([]byte(body)); code != string(tt.detail) {
					t.Errorf("error code %q, want the record's detail %s", code, tt.detail)
				}
			}
			if tt.detail == endreason.DetailConnectFailed && !strings.Contains(r.Error, upAddr) {
				t.Errorf("the record's error %q does not name the upstream %s", r.Error, upAddr)
			}
			if strings.Contains(r.Error, cookie) {
				t.Errorf("the record's error quotes upstream bytes: %q", r.Error)
			}
		})
	}
}

// TestStaleConnectionsAfterRestart restarts the upstream (its listener and
// every connection closed, then a new listener on the same port) while the
// proxy holds several idle keep-alive connections to it. Every request
// after the restart succeeds; in gateway mode, where a single failure
// ejects the upstream, it stays in rotation.
func TestStaleConnectionsAfterRestart(t *testing.T) {
	const pooled = 4
	tests := []struct {
		name  string
		start func(t *testing.T, upstreamURL string) (string, *captureSink)
		body  string
	}{
		{"pass-through", func(t *testing.T, upstreamURL string) (string, *captureSink) {
			addr, sink, _ := startProxy(t, upstreamURL, nil)
			return addr, sink
		}, chatBody},
		{"gateway, ejection after one failure", func(t *testing.T, upstreamURL string) (string, *captureSink) {
			addr, sink, _ := startGateway(t, `
routes: [{model: m, pool: p}]
pools: [{name: p, upstreams: [UP_A], ejection: {consecutive_failures: 1, duration: 1m}}]
`, map[string]string{"UP_A": upstreamURL})
			return addr, sink
		}, chat("m", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The first upstream holds each request until all are in, so the
			// proxy opens a connection for each and then pools them.
			var mu sync.Mutex
			arrived, all := 0, make(chan struct{})
			up := startUpstream(t, func(c *upConn) {
				mu.Lock()
				if arrived++; arrived == pooled {
					close(all)
				}
				mu.Unlock()
				<-all
				c.stream(1, 0)
			})
			addr, sink := tt.start(t, up.url)
			requestsSucceed(t, addr, sink, tt.body, pooled)
			up.mu.Lock()
			conns := map[*net.TCPConn]bool{}
			for _, c := range up.conns {
				conns[c.conn] = true
			}
			up.mu.Unlock()
			if len(conns) != pooled {
				t.Fatalf("the proxy used %d upstream connections, want %d to pool", len(conns), pooled)
			}

			up.close()
			ln, err := net.Listen("tcp", up.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			serveUpstream(t, ln, func(c *upConn) { c.stream(1, 0) })
			for range 3 {
				requestsSucceed(t, addr, sink, tt.body, 3)
			}
		})
	}
}

// requestsSucceed sends n requests at once and checks that each got a 200
// and a record that ended in a stop.
func requestsSucceed(t *testing.T, addr string, sink *captureSink, body string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, b, err := post(t, addr, body); err != nil || resp.StatusCode != 200 {
				t.Errorf("request: %v, status %d, body %.200q", err, resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	for range n {
		if r := sink.next(t); r.Reason != endreason.Stop {
			t.Errorf("record %s/%s (error %q)", r.Reason, r.Detail, r.Error)
		}
	}
}

// TestUpstreamSecretsNotRecorded has upstream error bodies echo a
// credential: the client gets the upstream's words unchanged (they are
// its), the record (logged, shown on the requests page) never has the
// credential: nothing of a 401 or 403 body, the rest redacted.
func TestUpstreamSecretsNotRecorded(t *testing.T) {
	const secret = "9f8e7d6c5b4a3210"
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		recorded    string // the record's error has this
	}{
		{"401 JSON", 401, "application/json", `{"error":{"message":"Incorrect API key provided: ` + secret + `"}}`,
			"upstream answered 401"},
		{"403 text", 403, "text/plain", "key " + secret + " may not use this model", "upstream answered 403"},
		{"400 quoting a bearer header", 400, "application/json", `{"error":{"message":"got Authorization: Bearer ` + secret + `"}}`,
			"Bearer [redacted]"},
		{"500 quoting a key parameter", 500, "text/html", "<p>GET /v1/models?api_key=" + secret + "&x=1 failed</p>",
			"api_key=[redacted]"},
		{"502 quoting an sk- key", 502, "application/json", `{"error":{"message":"key sk-live-` + secret + ` revoked"}}`,
			"sk-[redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, func(c *upConn) { c.whole(tt.status, tt.contentType, tt.body) })
			addr, sink, _ := startProxy(t, up.url, nil)
			resp, body, err := post(t, addr, chatBody)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || !strings.Contains(body, secret) {
				t.Errorf("client got %d %.300q, want %d with the upstream's words", resp.StatusCode, body, tt.status)
			}
			r := sink.next(t)
			if strings.Contains(r.Error, secret) || !strings.Contains(r.Error, tt.recorded) {
				t.Errorf("record's error %q, want it with %q and without the secret", r.Error, tt.recorded)
			}
		})
	}
}
