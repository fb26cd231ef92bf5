package refengine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestArrivalConn: the first read with bytes stamps the request's arrival;
// later reads (the body, net/http's background read) do not move it; after
// rearm, which reads what the handler left of the body, the next read
// stamps the next request.
func TestArrivalConn(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	ac := &arrivalConn{Conn: server}
	ac.armed.Store(true)
	go func() {
		for _, s := range []string{"head", "body", "rest of the body", "next"} {
			if _, err := client.Write([]byte(s)); err != nil {
				return
			}
		}
	}()
	read := func() {
		t.Helper()
		buf := make([]byte, 64)
		if _, err := ac.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := ac.arrived(); ok {
		t.Fatal("arrived before any read")
	}
	read() // head
	first, ok := ac.arrived()
	if !ok {
		t.Fatal("no arrival after the first read")
	}
	read() // body
	if again, _ := ac.arrived(); !again.Equal(first) {
		t.Errorf("a body read moved the arrival from %v to %v", first, again)
	}
	r := httptest.NewRequest(http.MethodPost, "/", io.LimitReader(ac, int64(len("rest of the body"))))
	ac.rearm(r) // reads the rest of the body, unarmed
	if _, ok := ac.arrived(); ok {
		t.Error("arrival kept after rearm")
	}
	read() // next
	next, ok := ac.arrived()
	if !ok || next.Before(first) {
		t.Errorf("next request's arrival %v (set %v), want one after %v", next, ok, first)
	}
}

// TestUnreadWait: on a socket the kernel timestamps, the first read of a
// request learns how long its bytes waited unread: at least the time the
// reader slept after they were written, at most the time since the write
// began.
func TestUnreadWait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := arrivalListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ac := c.(*arrivalConn)
	if ac.raw == nil {
		t.Fatal("accepted TCP connection without receive timestamps")
	}
	buf := make([]byte, 64)
	// The kernel turns receive timestamps on a moment after the first
	// socket asks: wait until a probe's bytes come with one.
	if !eventually(t, 5*time.Second, func() bool {
		if _, err := client.Write([]byte("probe")); err != nil {
			t.Fatal(err)
		}
		_, waited, err := ac.raw.ReadStamped(buf)
		if err != nil {
			t.Fatal(err)
		}
		return waited >= 0
	}) {
		t.Fatal("no receive timestamp within 5 s")
	}
	const slept = 30 * time.Millisecond
	before := time.Now()
	if _, err := client.Write([]byte("POST / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(slept)
	if _, err := ac.Read(buf); err != nil {
		t.Fatal(err)
	}
	since := time.Since(before)
	waited, ok := ac.waitedUnread()
	if !ok || waited < slept || waited > since {
		t.Errorf("waited unread %v (known %v), want between the sleep %v and the time since the write %v", waited, ok, slept, since)
	}
	if _, err := client.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Read(buf); err != nil {
		t.Fatal(err)
	}
	if again, _ := ac.waitedUnread(); again != waited {
		t.Errorf("a later read of the same request moved its unread wait from %v to %v", waited, again)
	}

	// The next request's first byte taken by a read begun before the rearm
	// (net/http's background read while a handler runs): the wait comes
	// from the next read's timestamp.
	ac.armed.Store(false)
	one := make(chan error, 1)
	go func() {
		_, err := ac.Read(buf[:1])
		one <- err
	}()
	ac.rearm(httptest.NewRequest(http.MethodGet, "/", http.NoBody))
	before = time.Now()
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-one; err != nil {
		t.Fatal(err)
	}
	if _, ok := ac.arrived(); !ok {
		t.Fatal("the first byte's read did not stamp the arrival")
	}
	if _, err := ac.Read(buf); err != nil {
		t.Fatal(err)
	}
	since = time.Since(before)
	if waited, ok := ac.waitedUnread(); !ok || waited > since {
		t.Errorf("after a one-byte read begun before the rearm: waited unread %v (known %v), want known and at most %v", waited, ok, since)
	}

	client.Close()
	if n, err := ac.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("read after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}

// serveEngine runs the engine with Serve on loopback and returns its URL and
// a client that keeps one connection.
func serveEngine(t *testing.T) (*Server, string, *http.Client) {
	t.Helper()
	s, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tr := &http.Transport{MaxConnsPerHost: 1}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String(), &http.Client{Transport: tr}
}

// TestPartsCoverTheWindow: under Serve, requests on one keep-alive
// connection each report parts that add up exactly to the engine's time
// from the request's first bytes to its first token, emit is reported as
// measured, and a request's clock starts after the previous one's handler
// ended (its reads are not taken for the next request's arrival).
func TestPartsCoverTheWindow(t *testing.T) {
	s, url, client := serveEngine(t)
	var prev Truth
	for i, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/chat/completions"} {
		body := chatBody("hello there", `"stream":true,"max_tokens":3`)
		if path == "/v1/completions" {
			body = `{"prompt":"hello there","stream":true,"max_tokens":3}`
		}
		id := "cover-" + string(rune('a'+i))
		req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
		req.Header.Set("X-Request-Id", id)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		items, err := readSSE(resp.Body, time.Now())
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var comment string
		for _, it := range items {
			if it.comment && strings.HasPrefix(it.data, "server-timing ") {
				comment = strings.TrimPrefix(it.data, "server-timing ")
			}
		}
		tr, ok := s.Truth(id)
		if !ok || comment == "" {
			t.Fatalf("%s: truth %v, comment %q", path, ok, comment)
		}
		parts := tr.Recv + tr.Media + tr.Tokenize + tr.Queue + tr.Prefill + tr.FirstDecode
		if parts != tr.FirstTokenSampled || tr.Recv <= 0 {
			t.Errorf("%s: recv %v + media + tokenize + queue + prefill + decode1 = %v, first token sampled at %v", path, tr.Recv, parts, tr.FirstTokenSampled)
		}
		if tr.Emit <= 0 || tr.FirstTokenSampled+tr.Emit > tr.TTFT {
			t.Errorf("%s: emit %v, sampled at %v, first token written at %v", path, tr.Emit, tr.FirstTokenSampled, tr.TTFT)
		}
		st := parseServerTiming(t, comment)
		// The kernel turns receive timestamps on a moment after the first
		// socket asks (Serve's listener), so the first request may have none.
		if _, ok := st["unread"]; !ok && i > 0 {
			t.Errorf("%s: no unread in %q (Serve's connections are timestamped)", path, comment)
		}
		for name, want := range map[string]time.Duration{"recv": tr.Recv, "emit": tr.Emit, "unread": tr.Unread} {
			if _, ok := st[name]; !ok && name == "unread" {
				continue
			}
			if got := st[name]; (got - want.Truncate(time.Microsecond)).Abs() > time.Microsecond {
				t.Errorf("%s: comment's %s %v, truth %v", path, name, got, want)
			}
		}
		if i > 0 && tr.Received.Before(prev.Received.Add(prev.E2E)) {
			t.Errorf("%s: received at %v, before the previous request's handler ended (%v)", path, tr.Received, prev.Received.Add(prev.E2E))
		}
		prev = tr
	}
}

// TestResetUnderServe: the reset fault still resets the connection when it
// is Serve's (the socket under the arrival note).
func TestResetUnderServe(t *testing.T) {
	_, url, client := serveEngine(t)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(chatBody("hi", `"stream":true,"max_tokens":8`)))
	req.Header.Set(FaultHeader, "reset_after=1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the reset fault: %v, want a connection reset", err)
	}
}
