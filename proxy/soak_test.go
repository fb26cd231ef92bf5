package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/record"

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
		c.reset() // what was written is in the proxy's socket already (loopback)
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
	// leftovers answers with the request's own id and, in the same write,
	// what no request asked for on its keep-alive connection: another
	// response, or stray bytes. The proxy must close that connection and no
	// client may read them (sendAs fails on a "leaked" answer). Written
	// with the response, they are there before the connection could be
	// pooled; bytes an upstream writes later race the next request written
	// on it, as under any HTTP/1.1 client (TestPooledConnLeftovers waits
	// for their discard instead).
	{"leftovers", func(c *upConn, stream bool) {
		id := c.req.Header.Get("X-Request-Id")
		extra := "leaked stray bytes"
		if len(id)%2 == 0 {
			extra = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"content\":\"leaked\"}"
		}
		if stream {
			c.role()
			c.content(id)
			c.finish("stop")
			c.done()
			c.write("0\r\n\r\n" + extra)
			return
		}
		body := strings.Replace(wholeCompletion, `"content":"hi"`, `"content":"`+id+`"`, 1)
		c.sent = true
		c.write(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s%s", len(body), body, extra))
	}, endreason.DetailStop, endreason.DetailStop},
}

// longStream is the request the soak's shutdown cuts.
var longStream = engineFault{"long", func(c *upConn, _ bool) { c.stream(100000, 10*time.Millisecond) },
	endreason.DetailShutdown, endreason.DetailShutdown}

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
	return &longStream
}

// matrixUpstream runs the fault the request names; for a client that
// leaves, it first waits for the proxy to close the connection (so the
// client's leaving, not the fault, ends the request), after the first
// bytes when the client waits for those.
func matrixUpstream(t *testing.T) *testUpstream {
	return startUpstream(t, func(c *upConn) {
		arrived := func() {
			if ch, ok := arrivals.LoadAndDelete(c.req.Header.Get("X-Request-Id")); ok {
				close(ch.(chan struct{}))
			}
		}
		f := faultByBody(c.body)
		stream := strings.Contains(c.body, `"stream":true`)
		switch {
		case strings.Contains(c.req.URL.RawQuery, "leave=early"):
			arrived()
			c.waitGone(10 * time.Second)
		case strings.Contains(c.req.URL.RawQuery, "leave=late"):
			if stream {
				c.role()
				c.content("first")
			} else {
				c.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			}
			arrived() // once the first bytes are out
			c.waitGone(10 * time.Second)
		default:
			arrived()
			f.script(c, stream)
		}
	})
}

// arrivals maps a request id to a channel the upstream closes when the
// request reaches it (for a client that leaves after the first bytes, once
// it has sent them), so that a client leaves only once its request is in
// flight.
var arrivals sync.Map

var requestSeq atomic.Int64

// sendAs sends one request as the client behaviour says, on a raw
// connection, and returns once the client has read what it reads.
func sendAs(t *testing.T, addr, body string, behaviour int) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	id := fmt.Sprintf("req-%d", requestSeq.Add(1))
	arrived := make(chan struct{})
	arrivals.Store(id, arrived)
	defer arrivals.Delete(id)
	waitArrival := func() {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Errorf("request %s never reached the upstream", id)
		}
	}
	path := "/v1/chat/completions"
	switch behaviour {
	case clientLeavesEarly:
		path += "?leave=early"
	case clientLeavesAfterFirstBytes:
		path += "?leave=late"
	}
	// A client that waits for the silent upstream has a short first-token
	// deadline (that request's end); every other request has a long one, so
	// its own end, not the deadline, ends it however loaded the machine.
	ttftMs := 30000
	if behaviour == clientReads && strings.Contains(body, `"content":"silent"`) {
		ttftMs = 300
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nX-Ttftlens-TTFT-Deadline-Ms: %d\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, id, ttftMs, len(body), body)
	br := bufio.NewReader(conn)
	switch behaviour {
	case clientLeavesEarly:
		waitArrival()
	case clientLeavesAfterFirstBytes:
		waitArrival()
		if strings.Contains(body, `"stream":true`) {
			_, _ = br.ReadString('\n') // the status line: the response started
		} // else the upstream has sent its first bytes; nothing reaches the client before the body's end
	default:
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(br)
		if bytes.Contains(got, []byte("leaked")) {
			t.Errorf("request %s read bytes an upstream sent after another response: %q", id, got)
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
	addr, sink, _ := startProxy(t, up.url, nil)
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

// countSink counts records by end detail.
type countSink struct {
	mu      sync.Mutex
	n       int
	details map[endreason.Detail]int
}

func (s *countSink) Emit(r *record.Record) {
	s.mu.Lock()
	s.n++
	s.details[r.Detail]++
	s.mu.Unlock()
}

func (s *countSink) count() (int, map[endreason.Detail]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.details
}

// countTracker counts requests the handler started and ended.
type countTracker struct{ started, ended atomic.Int64 }

func (c *countTracker) RequestStarted() { c.started.Add(1) }
func (c *countTracker) RequestEnded()   { c.ended.Add(1) }

// requestsTotal sums ttftlens_requests_total over its series.
func requestsTotal(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range families {
		if mf.GetName() == "ttftlens_requests_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int(n)
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestSoak sends a few thousand requests with random upstream faults,
// streamed or not, from clients that read all or leave, then cuts a batch
// of long streams with a shutdown: every request the handler started ends
// in exactly one record and one count in the metrics, and after the proxy
// and upstream stop no file descriptor is left open (goroutines: TestMain's
// goleak).
func TestSoak(t *testing.T) {
	const requests, workers, cutStreams = 3000, 16, 40
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	type job struct {
		body      string
		behaviour int
		want      endreason.Detail
	}
	jobs := make([]job, requests)
	for i := range jobs {
		f := &faultMenu[rng.IntN(len(faultMenu))]
		stream, behaviour := rng.IntN(2) == 0, rng.IntN(numClientBehaviours)
		_, want := expected(f, stream, behaviour)
		jobs[i] = job{requestBody(f.name, stream), behaviour, want}
	}

	files := openFiles(t)
	up := matrixUpstream(t)
	reg := prometheus.NewRegistry()
	name := strings.TrimPrefix(up.url, "http://")
	metrics := exporters.NewMetrics(reg, exporters.MetricOptions{Upstreams: []string{name}, Models: []string{"m"}})
	counts := &countSink{details: map[endreason.Detail]int{}}
	tracker := &countTracker{}
	p, addr, served := serveToShutdown(t, Config{Upstream: up.url, Tracker: tracker}, record.Sinks{counts, metrics})

	want := map[endreason.Detail]int{}
	for _, j := range jobs {
		want[j.want]++
	}
	next := make(chan job)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				sendAs(t, addr, j.body, j.behaviour)
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	waitFor(t, func() bool { n, _ := counts.count(); return n == requests })
	n, got := counts.count()
	for d := range got {
		if got[d] != want[d] {
			t.Errorf("%d records %s, want %d", got[d], d, want[d])
		}
	}
	if started := tracker.started.Load(); started != requests || n != requests || requestsTotal(t, reg) != requests {
		t.Errorf("requests %d, handler started %d, records %d, requests_total %d", requests, started, n, requestsTotal(t, reg))
	}

	// A shutdown in the middle of long streams: each is cut, with its record.
	var clients []net.Conn
	for range cutStreams {
		conn, br := rawClient(t, addr, requestBody("long", true))
		clients = append(clients, conn)
		readUntil(t, br, "t0 ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Shutdown(ctx); err == nil {
		t.Error("Shutdown cut nothing")
	}
	<-served
	n, got = counts.count()
	if n != requests+cutStreams || got[endreason.DetailShutdown] != cutStreams || requestsTotal(t, reg) != n ||
		tracker.started.Load() != int64(n) || tracker.ended.Load() != int64(n) {
		t.Errorf("after the cut: records %d (%d shutdown), requests_total %d, started %d, ended %d; want %d",
			n, got[endreason.DetailShutdown], requestsTotal(t, reg), tracker.started.Load(), tracker.ended.Load(), requests+cutStreams)
	}

	for _, c := range clients {
		c.Close()
	}
	up.close()
	waitFor(t, func() bool { return openFiles(t) <= files })
	if now := openFiles(t); now > files {
		t.Errorf("%d files open after the soak, %d before", now, files)
	}
}

// waitFor polls cond for up to 10 s: for states that settle once the
// goroutines serving the last requests finish.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
}
