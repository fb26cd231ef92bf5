package proxy

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/stages"
)

// relayStream is n chat content events, as an engine streams them.
func relayStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString(": server-timing queue;dur=1, prefill;dur=2\n\n")
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for range n {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	return b.Bytes()
}

// relayHarness is an exchange reading an in-memory upstream body and
// writing it, framed as its stream writes to a client, to a connection that
// drops it.
type relayHarness struct {
	x   *exchange
	src *bytes.Reader
}

func newRelayHarness(tb testing.TB, stream []byte) *relayHarness {
	cfg := Config{Upstream: "http://127.0.0.1:1"}
	if err := cfg.Normalize(); err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{cfg: cfg, clock: stages.Monotonic}
	x := newExchange(p)
	x.client.conn = discardConn{}
	x.out.chunked = true
	return &relayHarness{x: x, src: bytes.NewReader(stream)}
}

// run relays the whole stream and returns the events seen.
func (h *relayHarness) run(tb testing.TB, stream []byte) int {
	x, r := h.x, &h.x.relay
	x.sig.Begin(engines.KindGeneric, noRequestHeaders)
	x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
	x.fin.rec.Stream.Reset()
	x.fin.facts.Done, r.dst.handedOut, r.dst.out = false, false, nil
	r.firstToken.Store(false)
	h.src.Reset(stream)
	r.src.scan.Reset(h.src)
	if _, err := r.WriteTo(streamWriter{x}); err != nil {
		tb.Fatal(err)
	}
	return x.fin.rec.Stream.Events
}

// discardConn is a client connection that takes every write.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkRelay is the per-event hot path: parse the upstream event, read
// what it says, time it, hand its bytes out.
func BenchmarkRelay(b *testing.B) {
	const n = 1000
	stream := relayStream(n)
	h := newRelayHarness(b, stream)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if got := h.run(b, stream); got != n+3 {
			b.Fatalf("relayed %d events, want %d", got, n+3)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(n+3)), "ns/event")
}

// TestRelayStreamShape checks what the benchmark relays: the data events
// (role, 5 content, finish, [DONE]), the content among them, and the engine's
// timing comment read and not counted as an event.
func TestRelayStreamShape(t *testing.T) {
	h := newRelayHarness(t, nil)
	if got := h.run(t, relayStream(5)); got != 8 {
		t.Fatalf("events %d, want 8", got)
	}
	if got := h.x.fin.rec.Stream.ContentEvents; got != 5 {
		t.Errorf("content events %d, want 5", got)
	}
	if src := h.x.sig.Source(); src != engines.SourceServerTiming {
		t.Errorf("engine timing comment not read (source %q)", src)
	}
}

// noRequestHeaders reads a request without headers.
func noRequestHeaders(string) []byte { return nil }
