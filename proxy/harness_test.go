package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}

// gotRecord is a record as a sink saw it, with what derives from its pooled
// parts computed at Emit time.
type gotRecord struct {
	record.Record
	bd     stages.Breakdown
	gaps   stages.Gaps
	gapSum time.Duration   // decode time between the first and the last token
	resid  []time.Duration // each event's time inside the proxy
}

// captureSink collects records and checks the stage identity on each.
type captureSink struct {
	t    *testing.T
	recs chan gotRecord
}

func newCaptureSink(t *testing.T) *captureSink {
	return &captureSink{t: t, recs: make(chan gotRecord, 1024)}
}

func (s *captureSink) Emit(r *record.Record) {
	g := gotRecord{Record: *r, bd: r.Breakdown(), gaps: r.Stream.Gaps(), resid: slices.Clone(r.Stream.Residencies())}
	for _, d := range r.Stream.GapValues() {
		g.gapSum += d
	}
	g.Stream = stages.Stream{Events: r.Stream.Events, ContentEvents: r.Stream.ContentEvents,
		Stalls: r.Stream.Stalls, Blocked: r.Stream.Blocked, MaxResidency: r.Stream.MaxResidency,
		Arrivals: r.Stream.Arrivals, FirstTogether: r.Stream.FirstTogether}
	checkIdentity(s.t, &g)
	s.recs <- g
}

// next waits for the next record.
func (s *captureSink) next(t *testing.T) gotRecord {
	t.Helper()
	select {
	case r := <-s.recs:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no record within 5s")
		return gotRecord{}
	}
}

// none fails if a record arrives within d (exactly one record per request).
func (s *captureSink) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r := <-s.recs:
		t.Fatalf("unexpected extra record: %s %s", r.Reason, r.Detail)
	case <-time.After(d):
	}
}

// checkIdentity asserts the stage identity (ARCHITECTURE.md): the stages
// add up exactly to TTFT and none is negative.
func checkIdentity(t *testing.T, g *gotRecord) {
	if !g.bd.OK {
		return
	}
	var sum time.Duration
	for s, d := range g.bd.Stages {
		if d < 0 {
			t.Errorf("request %s: stage %s negative: %v", g.RequestID, stages.Stage(s), d)
		}
		sum += d
	}
	if sum != g.bd.TTFT {
		t.Errorf("request %s: stages sum %v != TTFT %v", g.RequestID, sum, g.bd.TTFT)
	}
}

// upConn is one upstream connection as a test script drives it. The script
// writes raw HTTP/1.1, so it can also misbehave.
type upConn struct {
	t    testing.TB
	conn *net.TCPConn
	req  *http.Request
	body string
	gone chan time.Time // closed-connection time, once the proxy closes it
	sent bool           // response headers written
}

func (c *upConn) write(s string) bool {
	_, err := io.WriteString(c.conn, s)
	return err == nil
}

// headers starts a chunked response.
func (c *upConn) headers(status int, contentType string, extra ...string) bool {
	c.sent = true
	h := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n", status, http.StatusText(status), contentType)
	for _, e := range extra {
		h += e + "\r\n"
	}
	return c.write(h + "\r\n")
}

func (c *upConn) sse() bool { return c.headers(200, "text/event-stream") }

// chunk sends one chunk, after SSE headers if none were sent.
func (c *upConn) chunk(s string) bool {
	if !c.sent && !c.sse() {
		return false
	}
	if s == "" {
		return true
	}
	return c.write(fmt.Sprintf("%x\r\n%s\r\n", len(s), s))
}

// event sends one SSE data event in its own chunk.
func (c *upConn) event(data string) bool { return c.chunk("data: " + data + "\n\n") }

// content sends a chat chunk carrying text.
func (c *upConn) content(text string) bool {
	return c.event(`{"choices":[{"index":0,"delta":{"content":"` + text + `"}}]}`)
}

func (c *upConn) role() bool {
	return c.event(`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
}

func (c *upConn) finish(reason string) bool {
	return c.event(`{"choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`)
}

func (c *upConn) done() bool { return c.event("[DONE]") }

// end finishes the chunked body cleanly.
func (c *upConn) end() bool { return c.write("0\r\n\r\n") }

// whole sends a complete response with a Content-Length.
func (c *upConn) whole(status int, contentType, body string) bool {
	c.sent = true
	return c.write(fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), contentType, len(body), body))
}

// reset aborts the connection with a TCP RST.
func (c *upConn) reset() {
	_ = c.conn.SetLinger(0)
	_ = c.conn.Close()
}

// waitGone waits until the proxy closes the connection and returns when.
func (c *upConn) waitGone(d time.Duration) (time.Time, bool) {
	select {
	case at := <-c.gone:
		return at, true
	case <-time.After(d):
		return time.Time{}, false
	}
}

// stream sends a normal completion: role, n content chunks every gap,
// finish stop, [DONE], end.
func (c *upConn) stream(n int, gap time.Duration) {
	c.role()
	for i := range n {
		if !c.content(fmt.Sprintf("t%d ", i)) {
			return
		}
		time.Sleep(gap)
	}
	c.finish("stop")
	c.done()
	c.end()
}

// holdStream sends the role chunk, and a first content chunk unless first
// is empty, waits for release, then sends rest and a normal end.
func (c *upConn) holdStream(release <-chan struct{}, first, rest string) {
	c.role()
	if first != "" {
		c.content(first)
	}
	<-release
	c.content(rest)
	c.finish("stop")
	c.done()
	c.end()
}

// testUpstream accepts connections and runs script for each request.
type testUpstream struct {
	ln     net.Listener
	url    string
	script func(c *upConn)
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []*upConn
	reqs   chan *upConn
}

func startUpstream(t testing.TB, script func(c *upConn)) *testUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveUpstream(t, ln, script)
}

// serveUpstream runs script for each request that arrives on ln, until the
// test ends or close.
func serveUpstream(t testing.TB, ln net.Listener, script func(c *upConn)) *testUpstream {
	u := &testUpstream{ln: ln, url: "http://" + ln.Addr().String(), script: script, reqs: make(chan *upConn, 100)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				u.serveConn(t, conn.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(u.close)
	return u
}

// serveConn reads requests on one connection; after the script of a request
// returns, it watches for the proxy closing the connection (or the next
// request on it).
func (u *testUpstream) serveConn(t testing.TB, conn *net.TCPConn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		c := &upConn{t: t, conn: conn, req: req, body: string(body), gone: make(chan time.Time, 1)}
		u.mu.Lock()
		u.conns = append(u.conns, c)
		u.mu.Unlock()
		// Watch for the proxy closing the connection, also while the
		// script runs (a blocked write would not notice): Peek returns an
		// error then, or succeeds when the next request arrives.
		watchDone := make(chan struct{})
		var peekErr error
		go func() {
			defer close(watchDone)
			if _, peekErr = br.Peek(1); peekErr != nil {
				c.gone <- time.Now()
			}
		}()
		select {
		case u.reqs <- c: // for tests that look at requests; others never drain it
		default:
		}
		u.script(c)
		<-watchDone
		if peekErr != nil {
			return
		}
	}
}

func (u *testUpstream) close() {
	u.ln.Close()
	u.mu.Lock()
	for _, c := range u.conns {
		c.conn.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// request returns the next request the upstream received.
func (u *testUpstream) request(t *testing.T) *upConn {
	t.Helper()
	select {
	case c := <-u.reqs:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("upstream saw no request within 5s")
		return nil
	}
}

// startProxy runs a proxy in front of upstreamURL with test defaults.
func startProxy(t *testing.T, upstreamURL string, mod func(*Config)) (string, *captureSink, *Proxy) {
	t.Helper()
	return startProxyTLS(t, upstreamURL, mod, nil)
}

// startProxyTLS is startProxy with a TLS listener when tlsCfg is not nil.
func startProxyTLS(t *testing.T, upstreamURL string, mod func(*Config), tlsCfg *tls.Config) (string, *captureSink, *Proxy) {
	t.Helper()
	// The test upstreams are scripts that answer every request alike: the
	// engine's /metrics is not scraped unless a test asks for it.
	cfg := Config{Upstream: upstreamURL, ScrapeEngineMetrics: -1}
	if mod != nil {
		mod(&cfg)
	}
	sink := newCaptureSink(t)
	p, err := New(cfg, sink, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return serveProxy(t, p, tlsCfg), sink, p
}

// acceptSignal closes first when its Accept is first called.
type acceptSignal struct {
	net.Listener
	once  sync.Once
	first chan struct{}
}

func (l *acceptSignal) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.first) })
	return l.Listener.Accept()
}

// serveProxy serves p on a loopback port (over TLS when tlsCfg is set)
// until the test ends, and returns the address.
func serveProxy(t testing.TB, p *Proxy, tlsCfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	serving := &acceptSignal{Listener: ln, first: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(serving)
	}()
	// fasthttp takes the listener before its first Accept; a Shutdown
	// before that would find nothing to stop, and Serve would run on.
	<-serving.first
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	return ln.Addr().String()
}

// testClient is a client without keep-alive or compression.
func testClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}, Timeout: 10 * time.Second}
}

const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// post sends a chat request and reads the whole response.
func post(t *testing.T, addr, body string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	return postPath(t, addr, "/v1/chat/completions", body, hdr...)
}

// postPath sends a request to path and reads the whole response.
func postPath(t *testing.T, addr, path, body string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1]) // a name given twice is sent twice
	}
	resp, err := testClient().Do(req)
	if err != nil {
		// Callers may run on other goroutines: report, don't Fatal.
		return &http.Response{Header: http.Header{}}, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// dialProxy opens a raw connection to addr, closed when the test ends.
func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawClient sends a chat request on a raw TCP connection, so a test can
// leave at any moment.
func rawClient(t *testing.T, addr, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	return rawClientTLS(t, addr, body, nil)
}

// rawClientTLS is rawClient over TLS when tlsCfg is not nil.
func rawClientTLS(t *testing.T, addr, body string, tlsCfg *tls.Config) (net.Conn, *bufio.Reader) {
	t.Helper()
	var conn net.Conn
	var err error
	if tlsCfg != nil {
		conn, err = tls.Dial("tcp", addr, tlsCfg)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return conn, bufio.NewReader(conn)
}

// readUntil reads from br until s has been seen.
func readUntil(t testing.TB, br *bufio.Reader, s string) {
	t.Helper()
	var got strings.Builder
	for !strings.Contains(got.String(), s) {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatalf("reading until %q: %v (got %q)", s, err, got.String())
		}
		got.WriteByte(b)
	}
}

// testTLS returns a server config with a fresh self-signed certificate for
// 127.0.0.1, and a client config that trusts it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ttftlens test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
}
