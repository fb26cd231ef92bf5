package proxy

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// discardCount is a ConnDiscards that counts, and signals each count.
type discardCount struct {
	mu      sync.Mutex
	n       map[endreason.ConnDiscard]int
	changed chan struct{}
}

func newDiscardCount() *discardCount {
	return &discardCount{n: map[endreason.ConnDiscard]int{}, changed: make(chan struct{}, 1)}
}

func (d *discardCount) UpstreamConnDiscarded(why endreason.ConnDiscard) {
	d.mu.Lock()
	d.n[why]++
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// counts returns the counts so far and their total.
func (d *discardCount) counts() (map[endreason.ConnDiscard]int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	total := 0
	n := make(map[endreason.ConnDiscard]int, len(d.n))
	for k, v := range d.n {
		n[k], total = v, total+v
	}
	return n, total
}

// waitTotal waits until want discards were counted.
func (d *discardCount) waitTotal(t *testing.T, want int) {
	t.Helper()
	for {
		n, total := d.counts()
		if total >= want {
			if total > want {
				t.Fatalf("%d discards %v, want %d", total, n, want)
			}
			return
		}
		select {
		case <-d.changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d discards %v, want %d", total, n, want)
		}
	}
}

var markerRE = regexp.MustCompile(`mk-[0-9]+`)

// TestPooledConnLeftovers holds the upstream pool to never handing one
// request's leftovers to another: an upstream that sends more than a
// response on a keep-alive connection, after it (an unsolicited response,
// stray bytes) or with it (bytes past its Content-Length, a second final
// chunk), gets that connection closed, counted, and never used again.
// Concurrent clients, streamed and not, each send their own marker, which
// the upstream echoes: every answer must be a 200 that carries its own
// marker and no other. The "after" misbehaviours are written once a round
// of requests has been answered, so no request is in flight on the
// connection (one that was would be the leftovers' rightful reader: HTTP/1.1
// cannot tell them apart); the next round starts once each was counted.
func TestPooledConnLeftovers(t *testing.T) {
	extraResponse := func(marker string) string {
		body := `{"choices":[{"index":0,"message":{"role":"assistant","content":"leaked ` + marker + `"},"finish_reason":"stop"}]}`
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	// Bytes read with the response, or found in the socket by the watcher
	// once it is idle, or by the check before the next request's write.
	spoiled := []endreason.ConnDiscard{endreason.DiscardBytesPastEnd, endreason.DiscardIdleReadable, endreason.DiscardReadableAtReuse}
	tests := []struct {
		name string
		// after: what the upstream writes on a connection once the round's
		// answers are in, given the marker it last answered there.
		after func(marker string) string
		// with: what it writes right behind the response to every other
		// request (chunked: after its final chunk; else past its length).
		with    func(marker string) string
		chunked bool // with: the response is chunked even for a request not streamed
		reasons []endreason.ConnDiscard
	}{
		{name: "unsolicited response after a response", after: extraResponse, reasons: spoiled},
		{name: "stray bytes after a response", after: func(string) string { return "\r\nstray\r\n" }, reasons: spoiled},
		{name: "bytes past the Content-Length", with: extraResponse, reasons: spoiled},
		{name: "a second final chunk", with: func(string) string { return "0\r\n\r\n" }, chunked: true, reasons: spoiled},
	}
	const rounds, clients = 5, 12
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			lastMarker := map[*net.TCPConn]string{} // the round's connections: the marker each answered last
			withCount := 0
			up := startUpstream(t, func(c *upConn) {
				marker := markerRE.FindString(c.body)
				streamed := strings.Contains(c.body, `"stream":true`)
				var seq int
				fmt.Sscanf(marker, "mk-%d", &seq)
				misbehave := tc.with != nil && seq%2 == 1 // every other request
				var tail string
				if misbehave {
					tail = tc.with(marker)
				}
				mu.Lock() // before the answer, which the round waits for
				lastMarker[c.conn] = marker
				if misbehave {
					withCount++
				}
				mu.Unlock()
				switch {
				case streamed || (misbehave && tc.chunked):
					c.sse()
					c.content(marker)
					c.finish("stop")
					c.done()
					c.write("0\r\n\r\n" + tail) // one write: the tail is there with the end
				default:
					body := `{"choices":[{"index":0,"message":{"role":"assistant","content":"` + marker + `"},"finish_reason":"stop"}]}`
					c.sent = true
					c.write(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s%s", len(body), body, tail))
				}
			})
			discards := newDiscardCount()
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.ConnDiscards = discards })
			want := 0
			for round := range rounds {
				var wg sync.WaitGroup
				for i := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						marker := fmt.Sprintf("mk-%d", round*clients+i)
						stream := i%2 == 0
						body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"%s"}]}`, stream, marker)
						resp, got, err := post(t, addr, body)
						if err != nil {
							t.Errorf("%s: %v", marker, err)
							return
						}
						if resp.StatusCode != 200 {
							t.Errorf("%s: status %d, body %q", marker, resp.StatusCode, got)
						}
						if seen := markerRE.FindAllString(got, -1); len(seen) == 0 || !allEqual(seen, marker) {
							t.Errorf("%s: the answer carries markers %v: %q", marker, seen, got)
						}
					}()
				}
				wg.Wait()
				for range clients {
					sink.next(t)
				}
				mu.Lock()
				if tc.after != nil {
					for conn, marker := range lastMarker {
						if _, err := conn.Write([]byte(tc.after(marker))); err == nil {
							want++
						}
					}
				} else {
					want = withCount
				}
				clear(lastMarker)
				mu.Unlock()
				discards.waitTotal(t, want)
				if t.Failed() {
					return
				}
			}
			n, _ := discards.counts()
			t.Logf("discards: %v", n)
			for why := range n {
				if !slices.Contains(tc.reasons, why) {
					t.Errorf("discards %v: %s is not among %v", n, why, tc.reasons)
				}
			}
		})
	}
}

func allEqual(seen []string, s string) bool {
	for _, v := range seen {
		if v != s {
			return false
		}
	}
	return true
}

// TestPooledConnDiscardReasons takes each way a pooled connection is found
// spoiled, one at a time, to its reason: bytes behind a response without
// a body (left in the headers' reader); with the watcher, what arrives
// while it is idle (bytes, the upstream's end); without one, the check
// right before the next request is written finds them. The next request
// gets its own answer on a connection dialed for it.
func TestPooledConnDiscardReasons(t *testing.T) {
	type spoil func(t *testing.T, c *net.TCPConn)
	const stray = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nleaked mk-0"
	strayBytes := func(t *testing.T, c *net.TCPConn) {
		if _, err := c.Write([]byte(stray)); err != nil {
			t.Fatal(err)
		}
	}
	end := func(t *testing.T, c *net.TCPConn) { c.CloseWrite() }
	for _, tc := range []struct {
		name    string
		watched bool
		behind  bool  // the first answer is a 204 with stray bytes behind it, in one write
		spoil   spoil // what the upstream does after the first answer
		want    endreason.ConnDiscard
	}{
		{"bytes behind a response without a body", true, true, nil, endreason.DiscardBytesPastEnd},
		{"bytes while idle, watched", true, false, strayBytes, endreason.DiscardIdleReadable},
		{"the end while idle, watched", true, false, end, endreason.DiscardIdleClosed},
		{"bytes at reuse", false, false, strayBytes, endreason.DiscardReadableAtReuse},
		{"the end at reuse", false, false, end, endreason.DiscardClosedAtReuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns := make(chan *net.TCPConn, 2)
			up := startUpstream(t, func(c *upConn) {
				marker := markerRE.FindString(c.body)
				if tc.behind && marker == "mk-0" {
					c.write("HTTP/1.1 204 No Content\r\n\r\n" + stray)
				} else {
					c.whole(200, "application/json", `{"content":"`+marker+`"}`)
				}
				conns <- c.conn
			})
			var w *sock.Watcher
			if tc.watched {
				var err error
				if w, err = sock.NewWatcher(); err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			u, err := newUpstream(up.url, "up", defaultUpstreamHeaderBytes, w)
			if err != nil {
				t.Fatal(err)
			}
			defer u.hc.CloseIdleConnections()
			discards := newDiscardCount()
			u.discards = discards

			used, got, cc := exchangeOnce(t, u, "mk-0")
			want := `{"content":"mk-0"}`
			if tc.behind {
				want = ""
			}
			if used != record.ConnNew || got != want {
				t.Fatalf("first exchange: %s, %q", used, got)
			}
			switch conn := <-conns; {
			case tc.spoil == nil:
			case tc.watched:
				tc.spoil(t, conn)
				discards.waitTotal(t, 1) // the watcher's report
			default:
				tc.spoil(t, conn)
				sock.WaitReadable(cc.(*countingConn).Conn, 5*time.Second) // arrived, unread, in the pooled connection
			}
			used, got, _ = exchangeOnce(t, u, "mk-1")
			if used != record.ConnNew || got != `{"content":"mk-1"}` {
				t.Errorf("second exchange: %s, %q; want a new connection and its own answer", used, got)
			}
			if n, total := discards.counts(); total != 1 || n[tc.want] != 1 {
				t.Errorf("discards %v, want one %s", n, tc.want)
			}
		})
	}
}

// exchangeOnce sends a non-streamed request carrying marker through u's
// pool, reads the answer whole and gives the connection back; it returns
// which connection carried it, the body, and the connection.
func exchangeOnce(t *testing.T, u *upstream, marker string) (record.UpstreamConn, string, net.Conn) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + u.Addr + "/v1/chat/completions")
	req.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"` + marker + `"}]}`)
	var tl stages.Timeline
	clock := func() int64 { return time.Now().UnixNano() }
	tl.Start(clock, time.Now())
	var ab control
	ab.begin(tl.Now)
	var body upstreamBody
	used, err := u.roundTrip(req, resp, &ab, &tl, &body, nil)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	conn := body.conn
	got, err := io.ReadAll(&body)
	body.close(err != nil)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return used, string(got), conn
}
