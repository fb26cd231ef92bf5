package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/sock"
)

// refusalCount is a Refusals that counts.
type refusalCount struct {
	mu sync.Mutex
	n  map[endreason.Refusal]int
}

func (c *refusalCount) RequestRefused(r endreason.Refusal)    { c.add(r) }
func (c *refusalCount) ConnectionRefused(r endreason.Refusal) { c.add(r) }

func (c *refusalCount) add(r endreason.Refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[endreason.Refusal]int{}
	}
	c.n[r]++
}

func (c *refusalCount) get(r endreason.Refusal) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[r]
}

// errorCode returns the code of an OpenAI-style error body, "" when the
// body is not one.
func errorCode(body []byte) string {
	var v struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil || v.Error == nil || v.Error.Message == "" || v.Error.Type == "" {
		return ""
	}
	return v.Error.Code
}

// rawResponse reads one response from br; a read that outlives the
// guard fails the test (the proxy gave no answer).
func rawResponse(t *testing.T, conn net.Conn, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("response body: %v", err)
	}
	return resp, body
}

// TestRefusedHeads sends request heads the proxy cannot read: each is
// answered with an OpenAI-style error, the refusal's status and an
// X-Request-Id, and counted; none leaves a record.
func TestRefusedHeads(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	counts := &refusalCount{}
	addr, sink, _ := startProxy(t, up.url, func(c *Config) {
		c.MaxHeaderBytes = 2048
		c.Refusals = counts
	})
	tests := []struct {
		name    string
		send    string
		halfOff bool // the client closes its side after sending
		status  int
		why     endreason.Refusal
	}{
		{"headers over the limit", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n",
			false, 431, endreason.RefusedHeadersTooLarge},
		// The client is still sending when the proxy answers.
		{"1 MB of headers", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n",
			false, 431, endreason.RefusedHeadersTooLarge},
		{"not HTTP", "HELLO THERE\r\n\r\n", false, 400, endreason.RefusedMalformed},
		{"head cut off", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le",
			true, 400, endreason.RefusedIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			defer conn.Close()
			go func() {
				_, _ = io.WriteString(conn, tt.send)
				if tt.halfOff {
					_ = conn.(*net.TCPConn).CloseWrite()
				}
			}()
			resp, body := rawResponse(t, conn, bufio.NewReader(conn))
			if resp.StatusCode != tt.status || errorCode(body) != string(tt.why) {
				t.Errorf("got %d %s, want %d with code %s", resp.StatusCode, body, tt.status, tt.why)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if n := counts.get(tt.why); n != 1 {
				t.Errorf("refusal %s counted %d times, want 1", tt.why, n)
			}
			counts.mu.Lock()
			counts.n = nil
			counts.mu.Unlock()
		})
	}
	sink.none(t, 100*time.Millisecond)
}

// TestBodyFailures sends bodies the proxy cannot take: over the limit
// (answered 413 before it is all sent: with a Content-Length from the head,
// chunked as soon as the limit is passed), cut off, or framed wrongly. Each is recorded with its own end, and answered
// when someone listens.
func TestBodyFailures(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.MaxBodyBytes = 64 << 10 })
	const post = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n", 40<<10, strings.Repeat("a", 40<<10))
	tests := []struct {
		name   string
		send   string // the request up to where the proxy must answer
		status int    // 0: the client left, nobody to answer
		code   string
		reason endreason.Reason
		detail endreason.Detail
	}{
		{"over the limit", post + "Content-Length: 1048576\r\n\r\n" + strings.Repeat("a", 16<<10),
			413, "request_too_large", endreason.InvalidRequest, endreason.DetailRequestBodyTooLarge},
		{"chunked over the limit", post + "Transfer-Encoding: chunked\r\n\r\n" + chunk + chunk,
			413, "request_too_large", endreason.InvalidRequest, endreason.DetailRequestBodyTooLarge},
		{"bad chunk size", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
			400, "malformed_request_body", endreason.InvalidRequest, endreason.DetailMalformedRequest},
		{"client leaves mid-body", post + "Content-Length: 65536\r\n\r\n" + strings.Repeat("a", 16<<10),
			0, "", endreason.ClientCancel, endreason.DetailClientClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.send); err != nil {
				t.Fatal(err)
			}
			if tt.status == 0 {
				conn.Close()
			}
			r := sink.next(t)
			if r.Reason != tt.reason || r.Detail != tt.detail {
				t.Errorf("record %s/%s, want %s/%s", r.Reason, r.Detail, tt.reason, tt.detail)
			}
			if tt.status == 0 {
				return
			}
			resp, body := rawResponse(t, conn, bufio.NewReader(conn))
			if resp.StatusCode != tt.status || errorCode(body) != tt.code || r.Status != tt.status {
				t.Errorf("got %d %s (recorded %d), want %d %s", resp.StatusCode, body, r.Status, tt.status, tt.code)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || id != r.RequestID {
				t.Errorf("X-Request-Id %q, record %q", id, r.RequestID)
			}
		})
	}
}

// keysProxy runs a gateway with two keys (alice-key, bob-key) in front of
// up.
func keysProxy(t *testing.T, up string, mod func(*Config)) (string, *captureSink, *Proxy) {
	t.Helper()
	cfg, err := gateway.Parse([]byte(`
keys: [{name: alice, key: "`+gateway.HashKey("alice-key")+`"}, {name: bob, key: "`+gateway.HashKey("bob-key")+`"}]
routes: [{model: m, pool: p}]
pools: [{name: p, upstreams: [`+up+`]}]
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	t.Cleanup(gw.Stop)
	return startProxy(t, "", func(c *Config) {
		c.Gateway = gw
		if mod != nil {
			mod(c)
		}
	})
}

// TestUnauthenticatedBodyUnread posts a 4 MiB body without a valid key:
// the proxy answers 401 once it has the headers, while the client has sent
// 64 KiB of the body, and the record counts no body bytes read.
func TestUnauthenticatedBodyUnread(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := keysProxy(t, up.url, nil)
	const size = 4 << 20 // under the body limit: the key decides
	tests := []struct {
		name, auth string
		detail     endreason.Detail
	}{
		{"no key", "", endreason.DetailMissingKey},
		{"wrong key", "Authorization: Bearer nope\r\n", endreason.DetailInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s",
				tt.auth, size, strings.Repeat("a", 64<<10))
			resp, body := rawResponse(t, conn, bufio.NewReader(conn))
			if resp.StatusCode != 401 || errorCode(body) == "" {
				t.Errorf("got %d %s, want a 401 error", resp.StatusCode, body)
			}
			r := sink.next(t)
			if r.Detail != tt.detail || r.BytesIn != 0 {
				t.Errorf("record %s/%s with %d body bytes read, want %s with none", r.Reason, r.Detail, r.BytesIn, tt.detail)
			}
		})
	}
}

// TestEarlyAnswersReachClients checks that an answer given before the
// request was all read reaches a client that reads only once it has sent
// everything (Go's): the proxy drops what the client still sends before it
// closes, instead of resetting the connection over the answer.
func TestEarlyAnswersReachClients(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := keysProxy(t, up.url, nil)
	big := make([]byte, 16<<20) // more than the socket buffers hold
	post := func(key string) func() *http.Request {
		return func() *http.Request {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", bytes.NewReader(big))
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			return req
		}
	}
	bigHead := func() *http.Request {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/models", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 1<<20))
		return req
	}
	tests := []struct {
		name     string
		req      func() *http.Request
		status   int
		recorded bool
	}{
		{"unauthenticated body", post(""), 401, true},
		{"body over the limit", post("alice-key"), 413, true},
		{"1 MB of headers", bigHead, 431, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 3 { // a reset loses the answer most of the time, not always
				resp, err := testClient().Do(tt.req())
				if err != nil {
					t.Fatalf("the answer was lost: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.status || errorCode(body) == "" {
					t.Errorf("got %d %s, want a %d error", resp.StatusCode, body, tt.status)
				}
				if tt.recorded {
					sink.next(t)
				}
			}
		})
	}
}

// TestUnauthenticatedKeepsConnection checks a refusal with no body to
// leave unread keeps the connection for the next request (one with a body
// ends it: TestHeadDecides).
func TestUnauthenticatedKeepsConnection(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := keysProxy(t, up.url, nil)
	conn := dialProxy(t, addr)
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i, req := range []string{
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\n\r\n",
	} {
		io.WriteString(conn, req)
		resp, _ := rawResponse(t, conn, br)
		if want := []int{401, 401, 200}[i]; resp.StatusCode != want || resp.Close {
			t.Errorf("request %d: %d, connection close %v; want %d on a kept connection", i, resp.StatusCode, resp.Close, want)
		}
		sink.next(t)
	}
}

// TestBodyMemoryBudget holds one request's body in flight and checks a
// body that would take the budget over it is refused unread (503,
// Retry-After, recorded), and that the budget is given back at the end.
func TestBodyMemoryBudget(t *testing.T) {
	hold := make(chan struct{})
	up := startUpstream(t, func(c *upConn) {
		if strings.Contains(c.body, "hold") {
			<-hold
		}
		c.stream(1, 0)
	})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the upstream's cleanup
	addr, sink, p := startProxy(t, up.url, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBodyMemory = 100 << 10
	})
	body := func(n int, tag string) string {
		pad := n - len(chat("m", `,"user":"`+tag+`","pad":""`))
		return chat("m", `,"user":"`+tag+`","pad":"`+strings.Repeat("x", pad)+`"`)
	}
	held := make(chan int, 1)
	go func() {
		resp, _, _ := post(t, addr, body(60<<10, "hold"))
		held <- resp.StatusCode
	}()
	up.request(t) // the first body is held upstream

	conn := dialProxy(t, addr)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", 50<<10, strings.Repeat("a", 16<<10))
	resp, got := rawResponse(t, conn, bufio.NewReader(conn))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || errorCode(got) != string(endreason.DetailBodyMemoryFull) {
		t.Errorf("over the budget: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}
	if r := sink.next(t); r.Reason != endreason.WorkerFailure || r.Detail != endreason.DetailBodyMemoryFull || r.BytesIn != 0 {
		t.Errorf("refused record %s/%s, %d body bytes", r.Reason, r.Detail, r.BytesIn)
	}

	release.Do(func() { close(hold) })
	if s := <-held; s != 200 {
		t.Errorf("held request: %d", s)
	}
	sink.next(t)
	if resp, _, err := post(t, addr, body(50<<10, "after")); err != nil || resp.StatusCode != 200 {
		t.Errorf("after the held request ended: %v %d", err, resp.StatusCode)
	}
	sink.next(t)
	if n := p.bodies.inUse(); n != 0 {
		t.Errorf("%d bytes of the budget still held with nothing in flight", n)
	}
}

// TestStreamLetsGoOfItsBody: a streamed response gives its body's share of
// the body memory budget back at its first event, not at its end, so long
// streams do not keep new requests out.
func TestStreamLetsGoOfItsBody(t *testing.T) {
	rest := make(chan struct{})
	up := startUpstream(t, func(c *upConn) {
		if !strings.Contains(c.body, "hold") {
			c.stream(1, 0)
			return
		}
		c.holdStream(rest, "", "t")
	})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(rest) }) }) // before the upstream's cleanup
	addr, sink, p := startProxy(t, up.url, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBodyMemory = 64 << 10
	})
	body := func(tag string) string { return chat("m", `,"user":"`+tag+`","pad":"`+strings.Repeat("x", 40<<10)+`"`) }
	held := body("hold")
	conn := dialProxy(t, addr)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(held), held)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v", err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the first event's chunk size: it was sent
		t.Fatal(err)
	}
	if n := p.bodies.inUse(); n != 0 {
		t.Errorf("%d bytes of the budget held by a stream past its first event", n)
	}
	// A second body as large fits in the budget while the first stream runs.
	if resp, _, err := post(t, addr, body("second")); err != nil || resp.StatusCode != 200 {
		t.Errorf("a second body while the first stream runs: %v %v", err, resp)
	}
	sink.next(t)
	release.Do(func() { close(rest) })
	sink.next(t)
}

// TestConnectionCaps fills a cap with a live stream and an idle
// connection: the next connection is refused as it is accepted (an
// OpenAI-style error, counted) while the stream keeps flowing to its end.
func TestConnectionCaps(t *testing.T) {
	tests := []struct {
		name   string
		set    func(*Config)
		status int
		why    endreason.Refusal
	}{
		{"per client", func(c *Config) { c.MaxConnsPerClient = 2 }, 429, endreason.RefusedPerClientLimit},
		{"total", func(c *Config) { c.MaxConns, c.MaxConnsPerClient = 2, -1 }, 503, endreason.RefusedConnLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := make(chan struct{})
			up := startUpstream(t, func(c *upConn) { c.holdStream(next, "before ", "after") })
			var resume sync.Once
			t.Cleanup(func() { resume.Do(func() { close(next) }) }) // before the upstream's cleanup
			counts := &refusalCount{}
			addr, sink, _ := startProxy(t, up.url, func(c *Config) {
				tt.set(c)
				c.Refusals = counts
			})
			stream, sbr := rawClient(t, addr, chatBody)
			readUntil(t, sbr, "before")
			idle, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()

			over, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer over.Close()
			resp, body := rawResponse(t, over, bufio.NewReader(over))
			if resp.StatusCode != tt.status || errorCode(body) != string(tt.why) {
				t.Errorf("connection over the cap: %d %s, want %d %s", resp.StatusCode, body, tt.status, tt.why)
			}
			if n := counts.get(tt.why); n != 1 {
				t.Errorf("refusal %s counted %d times", tt.why, n)
			}

			resume.Do(func() { close(next) })
			readUntil(t, sbr, "[DONE]")
			if r := sink.next(t); r.Reason != endreason.Stop {
				t.Errorf("the stream ended %s/%s", r.Reason, r.Detail)
			}
			stream.Close()
		})
	}
}

// TestHeadDecides sends heads that the head alone refuses, with none or
// part of their bodies, then reads: the 401 or 413 comes while the rest of
// the body is unsent (the read that returns it proves that), with no 100
// Continue before it, recorded with no body bytes read, and the connection
// ends after it (the body is left unread).
func TestHeadDecides(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := keysProxy(t, up.url, func(c *Config) { c.MaxBodyBytes = 8 << 20 })
	const (
		alice  = "Authorization: Bearer alice-key\r\n"
		wrong  = "Authorization: Bearer nope\r\n"
		expect = "Expect: 100-continue\r\n"
		length = "Content-Length: 10000\r\n"
		huge   = "Content-Length: 100000000\r\n"
	)
	tests := []struct {
		name   string
		head   string // the head's lines past Host
		sent   int    // body bytes sent before the client reads
		status int
		detail endreason.Detail
	}{
		{"no key, the head alone", length, 0, 401, endreason.DetailMissingKey},
		{"no key, 100 bytes", length, 100, 401, endreason.DetailMissingKey},
		{"wrong key, 8000 bytes", wrong + length, 8000, 401, endreason.DetailInvalidKey},
		{"no key, chunked", "Transfer-Encoding: chunked\r\n", 0, 401, endreason.DetailMissingKey},
		{"over the limit, the head alone", alice + huge, 0, 413, endreason.DetailRequestBodyTooLarge},
		{"over the limit, 100 bytes", alice + huge, 100, 413, endreason.DetailRequestBodyTooLarge},
		{"100-continue, no key", expect + length, 0, 401, endreason.DetailMissingKey},
		{"100-continue, wrong key", wrong + expect + length, 0, 401, endreason.DetailInvalidKey},
		{"100-continue, over the limit", alice + expect + huge, 0, 413, endreason.DetailRequestBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%s\r\n%s", tt.head, strings.Repeat("a", tt.sent))
			br := bufio.NewReader(conn)
			resp, body := rawResponse(t, conn, br)
			if resp.StatusCode != tt.status || errorCode(body) == "" || !resp.Close {
				t.Errorf("got %d %s (connection close %v), want a %d error closing the connection", resp.StatusCode, body, resp.Close, tt.status)
			}
			if r := sink.next(t); r.Detail != tt.detail || r.BytesIn != 0 || r.Status != tt.status {
				t.Errorf("record %d %s with %d body bytes read, want %d %s with none", r.Status, r.Detail, r.BytesIn, tt.status, tt.detail)
			}
			if n, err := br.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("after the answer: %d bytes, %v; want the connection's end", n, err)
			}
		})
	}
	t.Run("100-continue, a valid key and a body within the limit", func(t *testing.T) {
		conn := dialProxy(t, addr)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n%s%sContent-Length: %d\r\n\r\n", alice, expect, len(chatBody))
		br := bufio.NewReader(conn)
		if resp, _ := rawResponse(t, conn, br); resp.StatusCode != 100 {
			t.Fatalf("got %d before the body, want 100 Continue", resp.StatusCode)
		}
		io.WriteString(conn, chatBody)
		if resp, body := rawResponse(t, conn, br); resp.StatusCode != 200 {
			t.Errorf("got %d %s", resp.StatusCode, body)
		}
		if r := sink.next(t); r.Reason != endreason.Stop || r.Key != "alice" {
			t.Errorf("record %s/%s key %q", r.Reason, r.Detail, r.Key)
		}
	})
}

// TestStalledBodiesRecorded: a request whose head was read gets its one
// record however its body fails, from its first byte on (fasthttp reads
// the body's first bytes before the handler runs), and a failure after
// authentication names the key.
func TestStalledBodiesRecorded(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	counts := &refusalCount{}
	addr, sink, _ := keysProxy(t, up.url, func(c *Config) {
		c.ReadTimeout = 300 * time.Millisecond
		c.Refusals = counts
	})
	const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\n"
	tests := []struct {
		name   string
		send   string
		leave  bool // the client closes its side after sending
		status int
		reason endreason.Reason
		detail endreason.Detail
	}{
		{"the head alone", head + "Content-Length: 20000\r\n\r\n", false, 408, endreason.ClientCancel, endreason.DetailBodyReadTimeout},
		{"3 bytes", head + "Content-Length: 20000\r\n\r\n{\"m", false, 408, endreason.ClientCancel, endreason.DetailBodyReadTimeout},
		{"9000 bytes", head + "Content-Length: 20000\r\n\r\n" + strings.Repeat("a", 9000), false, 408, endreason.ClientCancel, endreason.DetailBodyReadTimeout},
		{"3 bytes, then the client leaves", head + "Content-Length: 20000\r\n\r\n{\"m", true, 499, endreason.ClientCancel, endreason.DetailClientClosed},
		{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", false, 400, endreason.InvalidRequest, endreason.DetailMalformedRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dialProxy(t, addr)
			io.WriteString(conn, tt.send)
			if tt.leave {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			r := sink.next(t)
			if r.Reason != tt.reason || r.Detail != tt.detail || r.Status != tt.status || r.Key != "alice" {
				t.Errorf("record %d %s/%s key %q, want %d %s/%s key alice", r.Status, r.Reason, r.Detail, r.Key, tt.status, tt.reason, tt.detail)
			}
			if !tt.leave {
				if resp, body := rawResponse(t, conn, bufio.NewReader(conn)); resp.StatusCode != tt.status {
					t.Errorf("got %d %s, want %d", resp.StatusCode, body, tt.status)
				}
			}
		})
	}
	for _, why := range endreason.RequestRefusals() {
		if n := counts.get(why); n != 0 {
			t.Errorf("%d requests with a head refused as %s", n, why)
		}
	}
}

// TestIdlePreconnect: a connection that sends nothing within the read
// timeout is closed without an answer and counted apart from the requests
// refused for a head that was not sent in time.
func TestIdlePreconnect(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	counts := &refusalCount{}
	addr, _, _ := startProxy(t, up.url, func(c *Config) {
		c.ReadTimeout = 200 * time.Millisecond
		c.Refusals = counts
	})
	idle := endreason.Refusal("idle_preconnect")
	conn := dialProxy(t, addr)
	if b, err := io.ReadAll(conn); err != nil || len(b) != 0 {
		t.Errorf("an idle connection got %q, %v; want its end, unanswered", b, err)
	}
	part := dialProxy(t, addr)
	io.WriteString(part, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	if resp, body := rawResponse(t, part, bufio.NewReader(part)); resp.StatusCode != 408 || errorCode(body) != string(endreason.RefusedTimeout) {
		t.Errorf("a head cut short: %d %s", resp.StatusCode, body)
	}
	if i, to := counts.get(idle), counts.get(endreason.RefusedTimeout); i != 1 || to != 1 {
		t.Errorf("counted %d idle preconnects and %d timeouts, want 1 and 1", i, to)
	}
}

// TestBodyShareOfAKey: one key holding slow bodies takes at most its share
// of the body memory budget; another key's body still fits.
func TestBodyShareOfAKey(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := keysProxy(t, up.url, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBodyMemory = 128 << 10 // a key's share: a quarter, at least one body: 64 KiB
	})
	// Two of alice's bodies of 60 KiB stall past fasthttp's first 8 KiB:
	// the handler holds the first it takes, and refuses the other.
	answers := make(chan int, 2)
	var slow []net.Conn
	for range 2 {
		conn := dialProxy(t, addr)
		slow = append(slow, conn)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key\r\nContent-Length: %d\r\n\r\n%s",
			60<<10, strings.Repeat("a", 9000))
		go func() {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answers <- 0
				return
			}
			resp.Body.Close()
			answers <- resp.StatusCode
		}()
	}
	if s := <-answers; s != 503 {
		t.Fatalf("alice's second slow body: %d, want 503 past her share", s)
	}
	if r := sink.next(t); r.Detail != endreason.DetailBodyMemoryFull || r.Key != "alice" {
		t.Errorf("record %s key %q, want body_memory_full for alice", r.Detail, r.Key)
	}
	body := chat("m", `,"pad":"`+strings.Repeat("x", 50<<10)+`"`)
	if resp, got, err := post(t, addr, body, "Authorization", "Bearer bob-key"); err != nil || resp.StatusCode != 200 {
		t.Errorf("bob, while alice holds her share: %v %d %s", err, resp.StatusCode, got)
	}
	if r := sink.next(t); r.Key != "bob" || r.Reason != endreason.Stop {
		t.Errorf("bob's record %s/%s key %q", r.Reason, r.Detail, r.Key)
	}
	for _, c := range slow {
		c.Close()
	}
	if r := sink.next(t); r.Key != "alice" || r.Detail != endreason.DetailClientClosed {
		t.Errorf("alice's held body %s/%s key %q", r.Reason, r.Detail, r.Key)
	}
}

// TestHeadNotesLeftBehind: a head check's note fasthttp never handed on
// is not taken for a later request on its RequestCtx, and the sweep drops
// it once it is older than the notes still in use.
func TestHeadNotesLeftBehind(t *testing.T) {
	_, _, p := startProxy(t, "http://127.0.0.1:1", nil)
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, nil, nil)
	left := &headNote{}
	left.seq.Store(p.headSeq.Add(1))
	p.heads.Store(&ctx.Request.Header, left)
	if n := p.takeHead(&ctx); n != nil {
		t.Error("a note taken for a connection whose request began after it")
	}

	old, recent := &fasthttp.RequestHeader{}, &fasthttp.RequestHeader{}
	for _, h := range []*fasthttp.RequestHeader{old, recent} {
		n := &headNote{}
		n.seq.Store(p.headSeq.Add(1))
		p.heads.Store(h, n)
	}
	p.dropHeadsBefore(p.headSeq.Load()) // recent's seq: old's is before it
	if _, ok := p.heads.Load(old); ok {
		t.Error("the older note was not dropped")
	}
	if _, ok := p.heads.Load(recent); !ok {
		t.Error("the note as recent as the mark was dropped")
	}
}

// emfileListener is an in-memory listener whose Accepts fail as a process
// out of file descriptors does: the first fails ones, then, once a
// connection was accepted, every one until Close.
type emfileListener struct {
	*fasthttputil.InmemoryListener
	mu     sync.Mutex
	fails  int // Accepts left to fail; negative: every one
	closed bool
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	fail := l.fails != 0 && !l.closed
	if l.fails > 0 {
		l.fails--
	}
	l.mu.Unlock()
	if fail {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	c, err := l.InmemoryListener.Accept()
	l.mu.Lock()
	l.fails = -1
	l.mu.Unlock()
	return c, err
}

func (l *emfileListener) Close() error {
	l.mu.Lock()
	l.closed = true // Accept says so
	l.mu.Unlock()
	return l.InmemoryListener.Close()
}

// TestAcceptOutOfFiles: accept4 failing with EMFILE does not end Serve. It
// waits as net/http does, 5 ms doubling to 1 s (on the proxy's clock),
// then serves the connection that comes; the next failure waits 5 ms
// again; and Shutdown ends a wait at once.
func TestAcceptOutOfFiles(t *testing.T) {
	clk := &clock.Fake{}
	p, err := New(Config{Upstream: "http://127.0.0.1:1", ScrapeEngineMetrics: -1, Clock: clk}, newCaptureSink(t), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	armed := clk.Armed()
	ln := &emfileListener{InmemoryListener: fasthttputil.NewInmemoryListener(), fails: 10}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	// backoff returns the wait the accept loop starts, failing the test
	// when Serve returns instead.
	backoff := func() time.Duration {
		t.Helper()
		wait := make(chan time.Duration, 1)
		go func() { wait <- clk.WaitArmed(armed + 1) }()
		select {
		case d := <-wait:
			return d
		case err := <-served:
			t.Fatalf("Serve returned on an accept error that passes: %v", err)
			return 0
		}
	}
	ms := time.Millisecond
	for _, want := range []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second} {
		if got := backoff(); got != want {
			t.Fatalf("accept waits %v, want %v", got, want)
		}
		clk.Advance(want)
	}

	c, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: ttftlens\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer after the accept errors: %v", err)
	}
	resp.Body.Close()
	c.Close()

	if got := backoff(); got != 5*ms {
		t.Errorf("after a connection, accept waits %v, want 5ms again", got)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v after Shutdown, want nil", err)
	}
}

// TestMaxConnsFor: the default connection cap takes two descriptors per
// stream after FileReserve, within [1, DefaultMaxConns]; Normalize takes
// it from the process's own limit.
func TestMaxConnsFor(t *testing.T) {
	for _, tt := range []struct {
		files uint64
		want  int
	}{
		{0, DefaultMaxConns}, // not known
		{1, 1},
		{FileReserve, 1},
		{FileReserve + 2, 1},
		{256, 64}, // ulimit -n 256
		{1024, 448},
		{2*DefaultMaxConns + FileReserve - 1, DefaultMaxConns - 1},
		{2*DefaultMaxConns + FileReserve, DefaultMaxConns},
		{1 << 20, DefaultMaxConns},
	} {
		if got := MaxConnsFor(tt.files); got != tt.want {
			t.Errorf("MaxConnsFor(%d) = %d, want %d", tt.files, got, tt.want)
		}
	}
	files, _ := sock.FileLimit()
	cfg := Config{Upstream: "http://127.0.0.1:1"}
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	if want := MaxConnsFor(files); cfg.MaxConns != want {
		t.Errorf("default --max-conns %d under an open-file limit of %d, want %d", cfg.MaxConns, files, want)
	}
}
