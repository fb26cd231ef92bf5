package proxy

import (
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestUpstreamLimits sends upstream responses around the proxy's limits
// (response headers under and over --max-upstream-header-bytes, a
// non-streamed body over --max-body-bytes) and malformed headers. A refused
// response gets the client an OpenAI error that quotes nothing the
// upstream sent (its headers carry a cookie), and the record says why.
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
		{"malformed headers", malformed, nil, chatBody,
			502, endreason.UpstreamDisconnect, endreason.DetailClosedBeforeResp},
		{"non-streamed body over the limit", bigBody, func(c *Config) { c.MaxBodyBytes = 1 << 10 }, wholeRequest,
			502, endreason.WorkerFailure, endreason.DetailUpstreamBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, tt.script)
			addr, sink, _ := startProxy(t, up.url, tt.cfg)
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
			r := sink.next(t)
			if r.Reason != tt.reason || r.Detail != tt.detail {
				t.Errorf("record %s/%s, want %s/%s (error %q)", r.Reason, r.Detail, tt.reason, tt.detail, r.Error)
			}
			if strings.Contains(r.Error, cookie) {
				t.Errorf("the record's error quotes upstream bytes: %q", r.Error)
			}
		})
	}
}
