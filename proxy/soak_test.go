package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// An engineFault is what the engine does with a request, streamed or not,
// and the end detail it must be recorded with when the client waits for it.
type engineFault struct {
	name          string
	script        func(c *upConn, stream bool)
	stream, whole endreason.Detail // streamed and non-streamed requests
}

const wholeCompletion = `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

var faultMenu = []engineFault{
	{"none", func(c *upConn, stream bool) {
		if stream {
			c.stream(3, 0)
		} else {
			c.whole(200, "application/json", wholeCompletion)
		}
	}, endreason.DetailStop, endreason.DetailStop},
	{"5xx", func(c *upConn, _ bool) {
		c.whole(500, "application/json", `{"error":{"message":"engine died"}}`)
	}, endreason.DetailUpstream5xx, endreason.DetailUpstream5xx},
	{"closed before response", func(c *upConn, _ bool) { c.conn.Close() },
		endreason.DetailClosedBeforeResp, endreason.DetailClosedBeforeResp},
	{"reset mid-body", func(c *upConn, stream bool) {
		if stream {
			c.role()
			c.content("a")
		} else {
			c.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":")
		}
		time.Sleep(5 * time.Millisecond)
		c.reset()
	}, endreason.DetailResetMidStream, endreason.DetailResetMidStream},
	{"truncated body", func(c *upConn, stream bool) {
		if stream {
			c.role()
			c.content("a")
		} else {
			c.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":")
		}
		c.conn.Close()
	}, endreason.DetailTruncatedBody, endreason.DetailTruncatedBody},
	{"malformed event", func(c *upConn, stream bool) {
		if stream {
			c.content("a")
			c.chunk("data: {oops\n\n")
			c.end()
		} else {
			c.whole(200, "application/json", `{"id":"x","choices":[{"index":0,"message":`)
		}
	}, endreason.DetailMalformedEvent, endreason.DetailMalformedEvent},
	{"error event", func(c *upConn, stream bool) {
		if stream {
			c.content("a")
			c.event(`{"error":{"message":"out of memory"}}`)
			c.done()
			c.end()
		} else {
			c.whole(503, "application/json", `{"error":{"message":"overloaded"}}`)
		}
	}, endreason.DetailErrorEvent, endreason.DetailUpstream5xx},
	{"silent", func(c *upConn, _ bool) { c.waitGone(10 * time.Second) },
		endreason.DetailTTFTDeadline, endreason.DetailTTFTDeadline},
}

// The clients: one reads its whole response, one leaves before any of it,
// one after the first bytes.
const (
	clientReads = iota
	clientLeavesEarly
	clientLeavesAfterFirstBytes
	numClientBehaviours
)

var clientBehaviourNames = [numClientBehaviours]string{"reads all", "leaves before the response", "leaves after the first bytes"}

func requestBody(fault string, stream bool) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, fault)
}

// faultByBody finds the fault a request names in its message.
func faultByBody(body string) *engineFault {
	for i := range faultMenu {
		if strings.Contains(body, `"content":"`+faultMenu[i].name+`"`) {
			return &faultMenu[i]
		}
	}
	return &faultMenu[0]
}

// matrixUpstream runs the fault the request names; for a client that
// leaves, it first waits for the proxy to close the connection (so the
// client's leaving, not the fault, ends the request), after the first
// bytes when the client waits for those.
func matrixUpstream(t *testing.T) *testUpstream {
	return startUpstream(t, func(c *upConn) {
		f := faultByBody(c.body)
		stream := strings.Contains(c.body, `"stream":true`)
		switch {
		case strings.Contains(c.req.URL.RawQuery, "leave=early"):
			c.waitGone(10 * time.Second)
		case strings.Contains(c.req.URL.RawQuery, "leave=late"):
			if stream {
				c.role()
				c.content("first")
			} else {
				c.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			}
			c.waitGone(10 * time.Second)
		default:
			f.script(c, stream)
		}
	})
}

// sendAs sends one request as the client behaviour says, on a raw
// connection, and returns once the client has read what it reads.
func sendAs(t *testing.T, addr, body string, behaviour int) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	path := "/v1/chat/completions"
	switch behaviour {
	case clientLeavesEarly:
		path += "?leave=early"
	case clientLeavesAfterFirstBytes:
		path += "?leave=late"
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", path, len(body), body)
	br := bufio.NewReader(conn)
	switch behaviour {
	case clientLeavesEarly:
		time.Sleep(20 * time.Millisecond) // the request reaches the upstream
	case clientLeavesAfterFirstBytes:
		if strings.Contains(body, `"stream":true`) {
			_, _ = br.ReadString('\n') // the status line: the response started
		} else {
			time.Sleep(50 * time.Millisecond) // the upstream started its body; nothing reaches the client before its end
		}
	default:
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := br.ReadByte(); err != nil {
				return
			}
		}
	}
}

// expected is the end a request must be recorded with.
func expected(f *engineFault, stream bool, behaviour int) (endreason.Reason, endreason.Detail) {
	d := f.stream
	switch {
	case behaviour != clientReads:
		d = endreason.DetailClientClosed
	case !stream:
		d = f.whole
	}
	r, _ := d.Reason()
	return r, d
}

// TestFaultMatrix crosses every upstream fault with streamed and
// non-streamed requests and three client behaviours: each request ends in
// exactly one record, with the documented end.
func TestFaultMatrix(t *testing.T) {
	up := matrixUpstream(t)
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.FirstTokenTimeout = 300 * time.Millisecond })
	for _, f := range faultMenu {
		for _, stream := range []bool{true, false} {
			for behaviour := range numClientBehaviours {
				name := fmt.Sprintf("%s/stream=%v/%s", f.name, stream, clientBehaviourNames[behaviour])
				t.Run(name, func(t *testing.T) {
					sendAs(t, addr, requestBody(f.name, stream), behaviour)
					r := sink.next(t)
					wantReason, wantDetail := expected(&f, stream, behaviour)
					if r.Reason != wantReason || r.Detail != wantDetail {
						t.Errorf("record %s/%s (%s), want %s/%s", r.Reason, r.Detail, r.Error, wantReason, wantDetail)
					}
					sink.none(t, 30*time.Millisecond)
				})
			}
		}
	}
}
