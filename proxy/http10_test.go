package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestHTTP10Client sends HTTP/1.0 requests on a raw socket: the upstream
// gets them as HTTP/1.1, and a streamed answer is close-delimited (no
// chunked framing, which RFC 9112 §6.1 forbids for 1.0), each event
// reaching the client before the next is sent upstream.
func TestHTTP10Client(t *testing.T) {
	seen := make(chan struct{}) // the client has read the first token
	up := startUpstream(t, func(c *upConn) {
		if c.req.Method == "GET" {
			c.whole(200, "application/json", `{"object":"list","data":[]}`)
			return
		}
		c.role()
		c.content("first")
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			return
		}
		c.content("second")
		c.finish("stop")
		c.done()
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	tests := []struct {
		name, request string
		stream        bool
		wantBody      string
	}{
		{"POST stream", fmt.Sprintf("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody),
			true, "data: [DONE]"},
		{"GET", "GET /v1/models HTTP/1.0\r\n\r\n", false, `{"object":"list","data":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tt.request); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			tp := textproto.NewReader(br)
			status, err := tp.ReadLine()
			if err != nil || !strings.HasSuffix(status, " 200 OK") {
				t.Fatalf("status line %q (%v)", status, err)
			}
			hdr, err := tp.ReadMIMEHeader()
			if err != nil {
				t.Fatal(err)
			}
			if te := hdr.Get("Transfer-Encoding"); te != "" {
				t.Errorf("Transfer-Encoding %q to an HTTP/1.0 client", te)
			}
			if tt.stream {
				if cl, conn := hdr.Get("Content-Length"), hdr.Get("Connection"); cl != "" || conn != "close" {
					t.Errorf("Content-Length %q, Connection %q; want none, close", cl, conn)
				}
				if start, _ := br.Peek(len("data: ")); string(start) != "data: " {
					t.Errorf("body starts %q, want an event", start)
				}
				readUntil(t, br, `"content":"first"`)
				close(seen)
			}
			rest, err := io.ReadAll(br) // to the close
			if err != nil {
				t.Fatalf("reading to the close: %v", err)
			}
			if !strings.Contains(string(rest), tt.wantBody) {
				t.Errorf("body %q lacks %q", rest, tt.wantBody)
			}
			if got := up.request(t).req.Proto; got != "HTTP/1.1" {
				t.Errorf("upstream request %s, want HTTP/1.1", got)
			}
			if r := sink.next(t); r.Reason != endreason.Stop || r.Status != 200 {
				t.Errorf("record %s/%s status %d", r.Reason, r.Detail, r.Status)
			}
		})
	}
}

// TestHTTP10ClientLeaves: an HTTP/1.0 client that leaves mid-stream ends
// its request as a client cancel, in one record.
func TestHTTP10ClientLeaves(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1000, 20*time.Millisecond) })
	addr, sink, _ := startProxy(t, up.url, nil)
	conn := dialProxy(t, addr)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	readUntil(t, bufio.NewReader(conn), `"content":"t1 "`)
	conn.Close()
	if r := sink.next(t); r.Reason != endreason.ClientCancel {
		t.Errorf("record %s/%s, want client_cancel", r.Reason, r.Detail)
	}
	if _, ok := up.request(t).waitGone(5 * time.Second); !ok {
		t.Error("the upstream connection stayed open after the client left")
	}
	sink.none(t, 50*time.Millisecond)
}

// TestHTTP10StreamsLeaveTheConnectionCap checks that a streamed answer to an
// HTTP/1.0 client (its connection hijacked to write a close-delimited body)
// counts its connection out of the caps when it ends: closed streams must
// not fill the cap.
func TestHTTP10StreamsLeaveTheConnectionCap(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, p := startProxy(t, up.url, func(c *Config) { c.MaxConns, c.MaxConnsPerClient = 5, -1 })
	for range 3 {
		conn := dialProxy(t, addr)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, _ := io.ReadAll(conn); !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("stream not relayed: %q", b)
		}
		conn.Close()
		sink.next(t)
	}
	waitFor(t, func() bool { return openConns(p) == 0 })
	if n := openConns(p); n != 0 {
		t.Errorf("after 3 HTTP/1.0 streams ended, %d connections still counted open", n)
	}
}
