package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

// TestBufferingDetected checks each sign of upstream buffering.
func TestBufferingDetected(t *testing.T) {
	burst := func(c *upConn) {
		var all strings.Builder
		all.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
		for i := range 20 {
			fmt.Fprintf(&all, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}
		all.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		time.Sleep(50 * time.Millisecond) // "generation", held back
		c.chunk(all.String())             // then everything at once
		c.end()
	}
	tests := []struct {
		name   string
		script func(c *upConn)
		body   string
		want   record.Buffering
	}{
		{"natural stream", func(c *upConn) { c.stream(20, 3*time.Millisecond) }, chatBody, 0},
		// A small model decodes faster than any timing threshold could
		// assume, here after a long queue: still one event per read.
		{"fast decode after a long wait", func(c *upConn) {
			time.Sleep(150 * time.Millisecond)
			c.stream(20, 200*time.Microsecond)
		}, chatBody, 0},
		{"burst", burst, chatBody, record.BufferedBurst | record.BufferedLateFirst},
		// Events larger than one 4 KiB read of fasthttp's: a held-back
		// stream still arrives in a piece or two.
		{"burst of 600 B events", heldBack(60, 600), chatBody, record.BufferedBurst | record.BufferedLateFirst},
		{"burst of 1100 B events", heldBack(60, 1100), chatBody, record.BufferedBurst | record.BufferedLateFirst},
		// The first token went out on time and the rest was held: the
		// buffering did not delay the first token.
		{"burst after a prompt first token", func(c *upConn) {
			c.role()
			c.content("first")
			time.Sleep(50 * time.Millisecond)
			heldBack(20, 0)(c)
		}, chatBody, record.BufferedBurst},
		{"not an event stream", func(c *upConn) {
			c.whole(200, "application/json", `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`)
		}, chatBody, record.BufferedNotStream},
		{"content length on an event stream", func(c *upConn) {
			body := `data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
			c.whole(200, "text/event-stream", body)
		}, chatBody, record.BufferedContentLength},
		{"short stream says nothing about arrival", func(c *upConn) { c.stream(3, 0) }, chatBody, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t, tt.script)
			addr, sink, _ := startProxy(t, up.url, nil)
			if _, _, err := post(t, addr, tt.body); err != nil {
				t.Fatal(err)
			}
			r := sink.next(t)
			if r.Buffering != tt.want {
				t.Errorf("buffering %v, want %v (%d content events in %d arrivals, first together %v)", r.Buffering.Kinds(), tt.want.Kinds(), r.Stream.ContentEvents, r.Stream.Arrivals, r.Stream.FirstTogether)
			}
		})
	}
}

// heldBack returns an upstream script that generates n content events of
// about size bytes (their JSON included), holds them, and writes them all
// at once with the finish and [DONE].
func heldBack(n, size int) func(c *upConn) {
	return func(c *upConn) {
		var all strings.Builder
		for i := range n {
			pad := strings.Repeat("x", max(size-60, 0))
			fmt.Fprintf(&all, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d%s\"}}]}\n\n", i, pad)
		}
		all.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		time.Sleep(50 * time.Millisecond) // "generation", held back
		c.chunk(all.String())
		c.end()
	}
}

// TestArrivalBuffering checks the arrival rule on hand-made counts: content
// events against the pieces the response came in, beyond its headers and
// its end.
func TestArrivalBuffering(t *testing.T) {
	tests := []struct {
		name          string
		content       int
		arrivals      int
		firstTogether bool
		want          record.Buffering
	}{
		{"too short to say", 7, 1, true, 0},
		{"not counted", 20, 0, true, 0},
		{"a piece per event and per framing write", 20, 26, false, 0},
		{"an engine a step behind: two per piece", 20, 12, true, 0},
		{"a middlebox passing three per piece", 24, 10, true, 0},
		{"just under four per piece", 23, 8, false, 0},
		{"four per piece", 24, 8, false, record.BufferedBurst},
		{"a held stream across Ethernet: six per segment", 60, 12, true, record.BufferedBurst | record.BufferedLateFirst},
		{"all at the end, with headers and end apart", 8, 3, true, record.BufferedBurst | record.BufferedLateFirst},
		{"all at once, headers and end included", 8, 1, true, record.BufferedBurst | record.BufferedLateFirst},
		{"first alone, then the rest in one piece", 20, 5, false, record.BufferedBurst},
		{"pieces of sixteen", 320, 22, true, record.BufferedBurst | record.BufferedLateFirst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := stages.Stream{ContentEvents: tt.content, Arrivals: tt.arrivals, FirstTogether: tt.firstTogether}
			if got := arrivalBuffering(&s); got != tt.want {
				t.Errorf("got %v, want %v", got.Kinds(), tt.want.Kinds())
			}
		})
	}
}

// TestNoFalseBuffering runs 1,000 streams whose tokens arrive with natural
// jitter (gaps of 1–12 ms, occasional 50 ms hiccups, two tokens sometimes
// in one step) and requires that none is flagged as buffered.
func TestNoFalseBuffering(t *testing.T) {
	up := startUpstream(t, func(c *upConn) {
		rng := rand.New(rand.NewPCG(uint64(len(c.body)), uint64(time.Now().UnixNano())))
		c.role()
		n := 8 + rng.IntN(8)
		for i := range n {
			c.content(fmt.Sprintf("t%d", i))
			gap := time.Millisecond + time.Duration(rng.Int64N(int64(11*time.Millisecond)))
			switch r := rng.Float64(); {
			case r < 0.03:
				gap = 50 * time.Millisecond
			case r < 0.15:
				gap = 0 // two tokens from one step
			}
			time.Sleep(gap)
		}
		c.finish("stop")
		c.done()
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	// However far behind the proxy falls (two busy cores, -race), the
	// kernel received each event in a segment of its own.
	const streams, conc = 1000, 16
	var wg sync.WaitGroup
	work := make(chan int)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, _, err := post(t, addr, fmt.Sprintf(`{"model":"m","stream":true,"user":"u%d","messages":[{"role":"user","content":"hi"}]}`, i)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range streams {
		work <- i
	}
	close(work)
	wg.Wait()
	flagged := 0
	for range streams {
		if r := sink.next(t); r.Buffering != 0 {
			flagged++
			if flagged <= 3 {
				t.Errorf("stream flagged %v: gaps %+v", r.Buffering.Kinds(), r.gaps)
			}
		}
	}
	if flagged > 0 {
		t.Errorf("%d of %d natural streams flagged as buffered", flagged, streams)
	}
}

// TestEngineBufferedFault checks that the reference engine's buffered fault
// is flagged and its normal streams are not.
func TestEngineBufferedFault(t *testing.T) {
	_, url := startEngine(t, refengine.Config{})
	addr, sink, _ := startProxy(t, url, func(c *Config) { c.AllowFaults = true })
	body := `{"model":"ttftlens-ref","stream":true,"max_tokens":24,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
	for _, tc := range []struct {
		fault string
		want  record.Buffering
	}{
		{"", 0},
		{"buffered", record.BufferedBurst | record.BufferedLateFirst},
		// The engine decodes faster than 1 ms a token after a long queue:
		// a user saw this flagged when the detector went by gaps.
		{"queue_delay=150ms", 0},
	} {
		if _, _, err := post(t, addr, body, "X-Ttftlens-Fault", tc.fault); err != nil {
			t.Fatal(err)
		}
		r := sink.next(t)
		if r.Buffering != tc.want {
			t.Errorf("fault %q: buffering %v, want %v (gaps %+v, content events %d, arrivals %d)",
				tc.fault, r.Buffering.Kinds(), tc.want.Kinds(), r.gaps, r.Stream.ContentEvents, r.Stream.Arrivals)
		}
	}
}

// TestCompressedUpstream checks a gzip-encoded event stream is decoded
// incrementally: the first token reaches the client while the engine still
// holds the rest, and the client gets plain events.
func TestCompressedUpstream(t *testing.T) {
	release := make(chan struct{})
	up := startUpstream(t, func(c *upConn) {
		c.headers(200, "text/event-stream", "Content-Encoding: gzip")
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		send := func(s string) {
			zw.Write([]byte(s))
			zw.Flush() // a sync flush per event, as a streaming compressor does
			c.chunk(buf.String())
			buf.Reset()
		}
		send(`data: {"choices":[{"index":0,"delta":{"content":"first"}}]}` + "\n\n")
		<-release
		send(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		zw.Close()
		c.chunk(buf.String())
		c.end()
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	_, br := rawClient(t, addr, chatBody)
	readUntil(t, br, `"content":"first"`) // before the engine sends anything more
	close(release)
	readUntil(t, br, "data: [DONE]")
	r := sink.next(t)
	if r.Reason != endreason.Stop || r.Buffering&record.BufferedCompressed == 0 || !r.bd.OK {
		t.Errorf("record %s/%s buffering %v ttft=%v", r.Reason, r.Detail, r.Buffering.Kinds(), r.bd.OK)
	}
}

// TestClientBreakdown checks the breakdown a client can ask for: a closing
// SSE comment and a Server-Timing trailer, both adding up to the TTFT the
// record has; and nothing when it does not ask or it is not allowed.
func TestClientBreakdown(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(2, 0) })
	for _, tc := range []struct {
		name         string
		allow, asked bool
	}{{"asked", true, true}, {"not asked", true, false}, {"not allowed", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.AllowBreakdown = tc.allow })
			var hdr []string
			if tc.asked {
				hdr = []string{breakdownHeader, "1", "TE", "trailers"}
			}
			resp, body, err := post(t, addr, chatBody, hdr...)
			if err != nil {
				t.Fatal(err)
			}
			r := sink.next(t)
			want := tc.allow && tc.asked
			comment := strings.Contains(body, ": ttftlens ttft;dur=")
			trailer := resp.Trailer.Get("Server-Timing")
			if comment != want || (trailer != "") != want {
				t.Fatalf("comment %v trailer %q, want both=%v (body %q)", comment, trailer, want, body)
			}
			if !want {
				return
			}
			if !strings.HasSuffix(body, "\n\n") || strings.Index(body, "[DONE]") > strings.Index(body, ": ttftlens") {
				t.Errorf("breakdown is not the last block: %q", body)
			}
			var us [stages.NumStages]int64
			ttft := r.bd.Micros(&us)
			wantST := string(appendServerTiming(nil, &r.bd))
			if trailer != wantST || !strings.Contains(body, wantST) {
				t.Errorf("trailer %q / body, want %q (ttft %dµs)", trailer, wantST, ttft)
			}
		})
	}
}

// TestResidencyRecorded checks every relayed event's time inside the proxy
// is kept: one residency per event, each positive, the largest as the
// record's maximum, and none longer than the request itself.
func TestResidencyRecorded(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(10, time.Millisecond) })
	addr, sink, _ := startProxy(t, up.url, nil)
	if _, _, err := post(t, addr, chatBody); err != nil {
		t.Fatal(err)
	}
	r := sink.next(t)
	res := r.resid
	if len(res) != r.Stream.Events || len(res) < 10 {
		t.Fatalf("%d residencies for %d events", len(res), r.Stream.Events)
	}
	for i, d := range res {
		if d <= 0 || d > r.Stream.MaxResidency {
			t.Errorf("event %d: residency %v, max %v", i, d, r.Stream.MaxResidency)
		}
	}
	if !slices.Contains(res, r.Stream.MaxResidency) || r.Stream.MaxResidency >= r.E2E() {
		t.Errorf("max residency %v, request %v", r.Stream.MaxResidency, r.E2E())
	}
}

// TestCompressedToClient checks compression of the stream to the client:
// every event is flushed on its own (the first token arrives while the
// upstream holds the rest), the decompressed bytes are the upstream's, and a
// client that does not accept the coding gets plain events.
func TestCompressedToClient(t *testing.T) {
	for _, coding := range []string{CompressGzip, CompressZstd} {
		t.Run(coding, func(t *testing.T) {
			release := make(chan struct{})
			up := startUpstream(t, func(c *upConn) {
				c.role()
				c.content("first")
				<-release
				c.finish("stop")
				c.done()
				c.end()
			})
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.CompressStreams = coding })
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Accept-Encoding", coding)
			resp, err := testClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != coding {
				t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
			var plain io.Reader
			if coding == CompressGzip {
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				plain = zr
			} else {
				zr, err := zstd.NewReader(resp.Body, zstd.WithDecoderConcurrency(1))
				if err != nil {
					t.Fatal(err)
				}
				defer zr.Close()
				plain = zr
			}
			br := bufio.NewReader(plain)
			readUntil(t, br, `"content":"first"`) // before the upstream sends more
			close(release)
			rest, err := io.ReadAll(br)
			if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
				t.Fatalf("rest %q, %v", rest, err)
			}
			if r := sink.next(t); r.Reason != endreason.Stop {
				t.Errorf("record %s/%s", r.Reason, r.Detail)
			}
		})
	}
	up := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.CompressStreams = CompressGzip })
	resp, body, err := post(t, addr, chatBody, "Accept-Encoding", "identity, gzip;q=0")
	if err != nil || resp.Header.Get("Content-Encoding") != "" || !strings.Contains(body, "[DONE]") {
		t.Errorf("refused coding: %q %q %v", resp.Header.Get("Content-Encoding"), body, err)
	}
	sink.next(t)
}

// TestWholeBodyWithBreakdown: a non-streamed response with the client's
// breakdown keeps its body intact (the header value once overwrote it).
func TestWholeBodyWithBreakdown(t *testing.T) {
	const whole = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello hello hello hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	up := startUpstream(t, func(c *upConn) { c.whole(200, "application/json", whole) })
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.AllowBreakdown = true })
	resp, body, err := post(t, addr, `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, breakdownHeader, "1")
	if err != nil {
		t.Fatal(err)
	}
	sink.next(t)
	if body != whole {
		t.Fatalf("client body corrupted:\n got %q\nwant %q", body, whole)
	}
	if !strings.HasPrefix(resp.Header.Get("Server-Timing"), "ttft;dur=") {
		t.Errorf("Server-Timing %q", resp.Header.Get("Server-Timing"))
	}
}
