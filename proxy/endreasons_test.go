package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestEndReasons drives each way a request can end without the gateway,
// through real sockets, and checks what the client got and the one record.
// The deadlines are in TestDeadlines, on a fake clock.
func TestEndReasons(t *testing.T) {
	type want struct {
		status int
		reason endreason.Reason
		detail endreason.Detail
		ttft   bool   // the record has a TTFT
		cut    bool   // the client's stream ends without its final chunk
		body   string // the client's body contains this
		errObj bool   // the client's body is an OpenAI error object
	}
	tests := []struct {
		name   string
		script func(c *upConn)
		cfg    func(*Config)
		body   string
		want   want
	}{
		{"stop", func(c *upConn) { c.stream(3, 0) }, nil, chatBody,
			want{status: 200, reason: endreason.Stop, detail: endreason.DetailStop, ttft: true, body: "data: [DONE]"}},
		{"length", func(c *upConn) { c.role(); c.content("a"); c.finish("length"); c.done(); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.Length, detail: endreason.DetailLength, ttft: true}},
		{"tool calls", func(c *upConn) {
			c.role()
			c.event(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}`)
			c.finish("tool_calls")
			c.done()
			c.end()
		}, nil, chatBody, want{status: 200, reason: endreason.Stop, detail: endreason.DetailToolCalls, ttft: true}},
		{"content filter", func(c *upConn) { c.role(); c.content("a"); c.finish("content_filter"); c.done(); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.PolicyBlock, detail: endreason.DetailContentFilter, ttft: true}},
		{"finish without done", func(c *upConn) { c.content("a"); c.finish("stop"); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.Stop, detail: endreason.DetailNoDoneMarker, ttft: true}},
		{"5xx json before first byte", func(c *upConn) {
			c.whole(500, "application/json", `{"error":{"message":"engine died","type":"server_error"}}`)
		}, nil, chatBody, want{status: 500, reason: endreason.WorkerFailure, detail: endreason.DetailUpstream5xx, body: "engine died", errObj: true}},
		{"5xx html before first byte", func(c *upConn) { c.whole(503, "text/html", "<h1>down</h1>") }, nil, chatBody,
			want{status: 503, reason: endreason.WorkerFailure, detail: endreason.DetailUpstream5xx, errObj: true, body: "down"}},
		{"upstream 400", func(c *upConn) { c.whole(400, "application/json", `{"error":{"message":"bad"}}`) }, nil, chatBody,
			want{status: 400, reason: endreason.InvalidRequest, detail: endreason.DetailUpstreamRejected, errObj: true}},
		{"upstream 429", func(c *upConn) { c.whole(429, "application/json", `{"error":{"message":"slow down"}}`) }, nil, chatBody,
			want{status: 429, reason: endreason.PolicyBlock, detail: endreason.DetailUpstreamLimited, errObj: true}},
		{"error event mid-stream", func(c *upConn) {
			c.role()
			c.content("a")
			c.event(`{"error":{"message":"out of memory","type":"server_error"}}`)
			c.done()
			c.end()
		}, nil, chatBody, want{status: 200, reason: endreason.WorkerFailure, detail: endreason.DetailErrorEvent, ttft: true, body: "out of memory"}},
		{"engine abort finish", func(c *upConn) { c.content("a"); c.finish("abort"); c.done(); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.WorkerFailure, detail: endreason.DetailEngineAbort, ttft: true}},
		{"reset mid-stream", func(c *upConn) {
			c.sse()
			c.role()
			c.content("a")
			c.content("b")
			c.reset() // over loopback a and b are in the proxy's socket already: the reset does not take them back
		}, nil, chatBody,
			want{status: 200, reason: endreason.UpstreamDisconnect, detail: endreason.DetailResetMidStream, ttft: true, cut: true}},
		{"eof without done", func(c *upConn) { c.role(); c.content("a"); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.UpstreamDisconnect, detail: endreason.DetailEOFWithoutDone, ttft: true, cut: true}},
		{"truncated chunked body", func(c *upConn) { c.sse(); c.role(); c.content("a"); c.conn.Close() }, nil, chatBody,
			want{status: 200, reason: endreason.UpstreamDisconnect, detail: endreason.DetailTruncatedBody, ttft: true, cut: true}},
		{"closed before response", func(c *upConn) { c.conn.Close() }, nil, chatBody,
			want{status: 502, reason: endreason.UpstreamDisconnect, detail: endreason.DetailClosedBeforeResp, errObj: true}},
		{"garbage data", func(c *upConn) { c.sse(); c.chunk("data: this is not json\n\n"); c.end() }, nil, chatBody,
			want{status: 502, reason: endreason.WorkerFailure, detail: endreason.DetailMalformedEvent, errObj: true}},
		{"garbage after first token", func(c *upConn) { c.sse(); c.content("a"); c.chunk("data: {oops\n\n"); c.end() }, nil, chatBody,
			want{status: 200, reason: endreason.WorkerFailure, detail: endreason.DetailMalformedEvent, ttft: true, cut: true}},
		{"invalid utf-8", func(c *upConn) { c.sse(); c.content("a\xff\xfe"); c.done(); c.end() }, nil, chatBody,
			want{status: 502, reason: endreason.WorkerFailure, detail: endreason.DetailInvalidUTF8, errObj: true}},
		{"10 MB line", func(c *upConn) {
			c.sse()
			line := "data: " + strings.Repeat("x", 10<<20)
			for i := 0; i < len(line); i += 1 << 16 {
				if !c.chunk(line[i:min(i+1<<16, len(line))]) {
					return
				}
			}
		}, nil, chatBody, want{status: 502, reason: endreason.WorkerFailure, detail: endreason.DetailEventTooLarge, errObj: true}},
		{"wrong content type", func(c *upConn) { c.whole(200, "text/html", "<html>hello</html>") }, nil, chatBody,
			want{status: 502, reason: endreason.WorkerFailure, detail: endreason.DetailBadContentType, errObj: true}},
		{"non-streamed completion", func(c *upConn) {
			c.whole(200, "application/json", `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		}, nil, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, want{status: 200, reason: endreason.Stop, detail: endreason.DetailStop, ttft: true, body: `"content":"hi"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, tt.script)
			addr, sink, _ := startProxy(t, up.url, tt.cfg)
			resp, body, err := post(t, addr, tt.body)
			if resp.StatusCode != tt.want.status {
				t.Errorf("status %d, want %d (body %.200q)", resp.StatusCode, tt.want.status, body)
			}
			if tt.want.cut != isCut(err) {
				t.Errorf("client read error %v; want cut=%v", err, tt.want.cut)
			}
			if !tt.want.cut && err != nil {
				t.Errorf("client read: %v", err)
			}
			if tt.want.body != "" && !strings.Contains(body, tt.want.body) {
				t.Errorf("body %.300q does not contain %q", body, tt.want.body)
			}
			if tt.want.errObj && !isErrorObject(body) {
				t.Errorf("body %.300q is not an OpenAI error object", body)
			}
			if got := resp.Header.Get("X-Request-Id"); got == "" {
				t.Error("no X-Request-Id on the response")
			}
			r := sink.next(t)
			if r.Reason != tt.want.reason || r.Detail != tt.want.detail {
				t.Errorf("record %s/%s, want %s/%s (error %q)", r.Reason, r.Detail, tt.want.reason, tt.want.detail, r.Error)
			}
			if r.bd.OK != tt.want.ttft {
				t.Errorf("record has TTFT=%v, want %v", r.bd.OK, tt.want.ttft)
			}
			if r.Status != resp.StatusCode {
				t.Errorf("record status %d, client saw %d", r.Status, resp.StatusCode)
			}
			if r.RequestID != resp.Header.Get("X-Request-Id") {
				t.Errorf("record request id %q, response header %q", r.RequestID, resp.Header.Get("X-Request-Id"))
			}
			if r.Reason != endreason.Stop && r.Reason != endreason.Length && r.Error == "" && r.Status >= 500 {
				t.Errorf("failed record without an error text")
			}
			sink.none(t, 50*time.Millisecond)
		})
	}
}

func isCut(err error) bool {
	return err != nil && (errors.Is(err, io.ErrUnexpectedEOF) || isNetErr(err))
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

func isErrorObject(body string) bool {
	var v struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	return json.Unmarshal([]byte(body), &v) == nil && v.Error != nil && v.Error.Message != ""
}
