package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/stages"
)

// TestGatheredWrites: the events of one upstream read go to the client in
// one write (up to maxGather), and none is held back when the read after
// it has to wait: at every upstream read, the client has every whole event
// of the reads before it. A consumed block (the engine's timing comment)
// between gathered events does not make the relay read.
func TestGatheredWrites(t *testing.T) {
	ev := func(s string) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
	}
	evs := func(from, n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(ev(fmt.Sprint(from + i)))
		}
		return b.String()
	}
	done := `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
	for _, tc := range []struct {
		name   string
		reads  []string
		writes []int // events per client write
	}{
		{"one event a read", []string{ev("a"), ev("b"), done}, []int{1, 1, 2}},
		{"three in one read", []string{evs(0, 3), done}, []int{3, 2}},
		{"a read cut inside an event", []string{evs(0, 2) + ev("x")[:20], ev("x")[20:] + done}, []int{2, 3}},
		{"a comment between them is consumed", []string{ev("a") + gatherComment + ev("b"), done}, []int{2, 2}},
		{"a comment ends the read", []string{ev("a") + gatherComment, ev("b") + done}, []int{1, 3}},
		{"more than a write takes", []string{evs(0, maxGather+1), done}, []int{maxGather, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRelayHarness(t, nil)
			x, r := h.x, &h.x.relay
			x.out.chunked = false // the client's bytes are the events, unframed
			client := &writeLog{}
			x.client.conn = client
			up := &stepReader{reads: tc.reads, client: client, t: t}
			x.sig.Begin(engines.KindGeneric, noRequestHeaders)
			x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
			r.src.scan.Reset(up)
			if _, err := r.WriteTo(streamWriter{x}); err != nil {
				t.Fatal(err)
			}
			if got, want := client.all(), strings.Join(tc.reads, ""); got != strings.ReplaceAll(want, gatherComment, "") {
				t.Fatalf("client got %q, want %q", got, want)
			}
			var perWrite []int
			for _, w := range client.writes {
				perWrite = append(perWrite, strings.Count(w, "\n\n"))
			}
			if !slices.Equal(perWrite, tc.writes) {
				t.Errorf("events per write %v, want %v", perWrite, tc.writes)
			}
			if n, events := len(x.fin.rec.Stream.Residencies()), x.fin.rec.Stream.Events; n != events {
				t.Errorf("%d residencies for %d events", n, events)
			}
			if !x.fin.rec.Timeline.Has(stages.FirstTokenFlushed) {
				t.Error("first token not marked delivered")
			}
		})
	}
}

// gatherComment is the engine's timing comment, which the relay consumes.
const gatherComment = ": server-timing queue;dur=1\n\n"

// stepReader is an upstream body that returns reads one by one, and at
// each read checks that the client has every whole event of the reads
// before it.
type stepReader struct {
	reads  []string
	next   int
	client *writeLog
	t      *testing.T
	last   func() // called with the last read, if set
	framed bool   // the client's bytes are chunked: not checked
}

func (s *stepReader) Read(p []byte) (int, error) {
	if s.next == len(s.reads) {
		return 0, io.EOF
	}
	whole := strings.Join(s.reads[:s.next], "")
	whole = whole[:strings.LastIndex(whole, "\n\n")+1] // -1 + 1 when there is none
	if whole != "" {
		whole = strings.ReplaceAll(whole+"\n", gatherComment, "")
	}
	if got := s.client.all(); got != whole && !s.framed {
		s.t.Errorf("read %d with events held back: the client has %q, want %q", s.next, got, whole)
	}
	if len(p) < len(s.reads[s.next]) {
		s.t.Fatalf("read %d: %d bytes do not fit %d", s.next, len(s.reads[s.next]), len(p))
	}
	n := copy(p, s.reads[s.next])
	s.next++
	if s.next == len(s.reads) && s.last != nil {
		s.last()
	}
	return n, nil
}

// writeLog is a client connection that keeps each write.
type writeLog struct {
	net.Conn
	writes []string
}

func (c *writeLog) Write(p []byte) (int, error) {
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

func (c *writeLog) all() string {
	var b bytes.Buffer
	for _, w := range c.writes {
		b.WriteString(w)
	}
	return b.String()
}

// TestFirstEventMarkedWhenWritten: the head and the first event, written
// before the stream has its goroutine, are marked delivered as the write
// returns (first_token_flushed), not when the stream's goroutine first runs.
func TestFirstEventMarkedWhenWritten(t *testing.T) {
	h := newRelayHarness(t, nil)
	x, r := h.x, &h.x.relay
	client := &writeLog{}
	x.client.conn = client
	x.sig.Begin(engines.KindGeneric, noRequestHeaders)
	x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
	r.src.scan.Reset(strings.NewReader(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"))
	if err := r.nextEvent(); err != nil {
		t.Fatal(err)
	}
	x.writeFirst()
	if x.out.firstErr != nil || len(client.writes) != 1 {
		t.Fatalf("first write: %v, %d writes", x.out.firstErr, len(client.writes))
	}
	if !x.fin.rec.Timeline.Has(stages.FirstTokenFlushed) || len(x.fin.rec.Stream.Residencies()) != 1 {
		t.Error("the first event was written but not marked delivered")
	}
}

// TestBodyEndWithLastEvents: when the upstream's end came with its last
// events, they go out with the last chunk in one write, and are marked
// delivered.
func TestBodyEndWithLastEvents(t *testing.T) {
	h := newRelayHarness(t, nil)
	x, r := h.x, &h.x.relay
	client := &writeLog{}
	x.client.conn = client
	gen := x.ctl.begin(x.fin.rec.Timeline.Now)
	up := &stepReader{client: client, t: t, framed: true, reads: []string{
		`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n",
	}}
	// The body's framing saw its end with the last read: reading it again
	// returns at once.
	up.last = func() { r.src.body.open, r.src.body.frame.done, r.src.body.ab = true, true, &x.ctl }
	x.sig.Begin(engines.KindGeneric, noRequestHeaders)
	x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
	r.src.scan.Reset(up)
	if _, err := r.WriteTo(streamWriter{x}); err != nil {
		t.Fatal(err)
	}
	last := client.writes[len(client.writes)-1]
	if len(client.writes) != 2 || !strings.Contains(last, "[DONE]") || !strings.HasSuffix(last, "\r\n0\r\n\r\n") {
		t.Fatalf("writes %q: want the finish, [DONE] and the last chunk in the second", client.writes)
	}
	if n := len(x.fin.rec.Stream.Residencies()); n != 3 {
		t.Errorf("%d events marked delivered, want 3", n)
	}
	x.ctl.abort(gen, errClientGone) // the client leaves once it has it all
	if cause := x.ctl.aborted(); cause != nil {
		t.Errorf("a client that left after the whole stream aborted it: %v", cause)
	}
}
