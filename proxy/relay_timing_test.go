package proxy

import (
	"bytes"
	"io"
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

// relayHarness is an exchange reading an in-memory upstream body: Read until
// io.EOF, or, with writeTo, WriteTo, as fasthttp drives a streamed response.
type relayHarness struct {
	x       *exchange
	src     *bytes.Reader
	buf     []byte
	writeTo bool
}

func newRelayHarness(tb testing.TB, stream []byte) *relayHarness {
	cfg := Config{Upstream: "http://127.0.0.1:1"}
	if err := cfg.Normalize(); err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{cfg: cfg, clock: stages.Monotonic}
	return &relayHarness{x: newExchange(p), src: bytes.NewReader(stream), buf: make([]byte, 4096)}
}

// run relays the whole stream and returns the events seen.
func (h *relayHarness) run(tb testing.TB, stream []byte) int {
	x, r := h.x, &h.x.relay
	x.sig.Begin(engines.KindGeneric, x.peekReq)
	x.fin.rec.Timeline.Start(stages.Monotonic, time.Time{})
	x.fin.rec.Stream.Reset()
	x.fin.facts.Done, r.handedOut, r.out = false, false, nil
	r.firstToken.Store(false)
	h.src.Reset(stream)
	r.scan.Reset(h.src)
	if h.writeTo { // as fasthttp drives a streamed response
		if _, err := r.WriteTo(io.Discard); err != nil {
			tb.Fatal(err)
		}
		return x.fin.rec.Stream.Events
	}
	for {
		_, err := r.Read(h.buf)
		if err == io.EOF {
			return x.fin.rec.Stream.Events
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

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
