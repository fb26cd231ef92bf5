//go:build integration && linux && (amd64 || arm64)

package proxy_test

import (
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/bench/lab"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
)

var corpusRuns = flag.Int("buffering.runs", 10, "runs of each case of TestBufferingCorpus")

// corpusCase is a way streams reach the proxy, held back upstream or not.
type corpusCase struct {
	name string
	// held: something upstream holds the streams back, so every one must
	// be flagged a burst; otherwise none may be flagged at all.
	held bool
	// setup starts what the case's runs share and returns run, which sends
	// the case's streams once and returns their records' facts.
	setup func(t *testing.T) (run func(t *testing.T) []streamFacts)
}

// TestBufferingCorpus proves the buffering rule both ways: no stream that
// nobody held back is flagged (every demo scenario that injects no
// buffering, engines that coalesce tokens or lag a step, nginx between the
// proxy and the engine with proxy_buffering off and on), and every stream
// something held back is flagged a burst (the reference engine's buffered
// fault, middleboxes that release in pieces of 4 to 64 KiB or at the end,
// a compressing middlebox that flushes when its buffer fills). It logs the
// confusion matrix that BENCHMARKS.md reports. Nothing in it is timed.
func TestBufferingCorpus(t *testing.T) {
	runs := *corpusRuns
	var rows []string
	for _, c := range corpusCases(&corpus{t: t, stacks: map[string]func(*testing.T, bench.Config) []streamFacts{}}) {
		t.Run(c.name, func(t *testing.T) {
			run := c.setup(t)
			var streams, flagged, runsFlagged int
			// The margin: over the streams with enough content events to
			// judge, the most content events per piece an unheld stream
			// came in, the fewest a held-back one did.
			margin := -1.0
			for i := range runs {
				got := run(t)
				if len(got) == 0 {
					t.Fatalf("run %d: no stream", i)
				}
				n := 0
				for _, s := range got {
					if r, ok := s.eventsPerPiece(); ok && (margin < 0 || c.held && r < margin || !c.held && r > margin) {
						margin = r
					}
					if s.buffering&record.BufferedBurst != 0 {
						n++
					}
					if c.held && s.buffering&record.BufferedBurst == 0 {
						t.Errorf("run %d: held-back stream not flagged: %s", i, s)
					}
					if !c.held && s.buffering != 0 {
						t.Errorf("run %d: stream nobody held back flagged: %s", i, s)
					}
				}
				streams, flagged = streams+len(got), flagged+n
				if n > 0 {
					runsFlagged++
				}
			}
			held, m := "no", "-"
			if c.held {
				held = "yes"
			}
			if margin >= 0 {
				m = fmt.Sprintf("%.1f", margin)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %s |", c.name, held, runs, runsFlagged, streams, flagged, m))
		})
	}
	t.Logf("buffering corpus, %d runs per case, race detector %v:\n"+
		"| case | held back | runs | runs with a stream flagged | streams | streams flagged | content events per piece (unheld: most; held: fewest) |\n"+
		"| --- | --- | --- | --- | --- | --- | --- |\n%s", runs, raceEnabled(), strings.Join(rows, "\n"))
}

func raceEnabled() bool {
	bi, _ := debug.ReadBuildInfo()
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// corpus is what cases share, each started on first use and stopped when
// the corpus test ends: the reference engine, and the demo's stacks by
// engine configuration. (Cases run one after the other.)
type corpus struct {
	t      *testing.T
	ref    string
	stacks map[string]func(*testing.T, bench.Config) []streamFacts
}

// refEngine returns the URL of the shared reference engine, faults allowed.
func (c *corpus) refEngine(t *testing.T) string {
	if c.ref == "" {
		srv, err := refengine.New(refengine.Config{AllowFaults: true})
		if err != nil {
			t.Fatal(err)
		}
		ln := listen(t)
		go func() { _ = srv.Serve(ln) }()
		c.t.Cleanup(func() { srv.Close() })
		c.ref = "http://" + ln.Addr().String()
	}
	return c.ref
}

func corpusCases(c *corpus) []corpusCase {
	var cases []corpusCase
	for _, sc := range lab.Scenarios() {
		cases = append(cases,
			corpusCase{name: "demo " + sc.Name + ", baseline", setup: c.demoScenario(sc, false)},
			corpusCase{name: "demo " + sc.Name + ", injected", held: sc.Buffered, setup: c.demoScenario(sc, true)})
	}
	for _, ec := range lab.EndCases() {
		cases = append(cases, corpusCase{name: "demo " + ec.Name, setup: c.demoEnd(ec)})
	}
	const (
		ref24 = `{"model":"ttftlens-ref","stream":true,"max_tokens":24,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
		ref96 = `{"model":"ttftlens-ref","stream":true,"max_tokens":96,"ignore_eos":true,"messages":[{"role":"user","content":"tell me a story"}]}`
	)
	paced := scriptedEngine{events: 32, gap: 2 * time.Millisecond}.start
	// Long streams for the middleboxes to release in several pieces.
	long := scriptedEngine{events: 400}.start
	return append(cases,
		corpusCase{name: "engine coalescing 2-8 tokens per event", setup: viaProxy(scriptedEngine{events: 24, coalesce: true, gap: 2 * time.Millisecond}.start, "", 4)},
		corpusCase{name: "engine lagging a step, 16 streams at once", setup: viaProxy(scriptedEngine{events: 32, lag: true, gap: time.Millisecond}.start, "", 16)},
		// The reference engine decodes a token in a tenth of a millisecond:
		// an nginx that falls behind it for a few milliseconds (a busy
		// machine) forwards much of a 24-token stream in one read, as a
		// middlebox holding it would. A longer answer outlasts that.
		corpusCase{name: "nginx, proxy_buffering off, reference engine", setup: viaProxy(nginxFront(c.refEngine, false), ref96, 2)},
		corpusCase{name: "nginx, proxy_buffering on, reference engine", setup: viaProxy(nginxFront(c.refEngine, true), ref96, 2)},
		corpusCase{name: "nginx, proxy_buffering off, paced engine", setup: viaProxy(nginxFront(paced, false), "", 4)},
		corpusCase{name: "nginx, proxy_buffering on, paced engine", setup: viaProxy(nginxFront(paced, true), "", 4)},

		corpusCase{name: "reference engine, buffered fault, 24 tokens", held: true, setup: viaProxy(c.refEngine, ref24, 1, "X-Ttftlens-Fault", "buffered")},
		corpusCase{name: "reference engine, buffered fault, 96 tokens", held: true, setup: viaProxy(c.refEngine, ref96, 1, "X-Ttftlens-Fault", "buffered")},
		corpusCase{name: "middlebox releasing 4 KiB pieces", held: true, setup: viaProxy(middlebox(long, releasePieces(4<<10), 0), "", 1)},
		corpusCase{name: "middlebox releasing 16 KiB pieces", held: true, setup: viaProxy(middlebox(long, releasePieces(16<<10), 0), "", 1)},
		corpusCase{name: "middlebox releasing 64 KiB pieces", held: true, setup: viaProxy(middlebox(long, releasePieces(64<<10), 0), "", 1)},
		corpusCase{name: "middlebox releasing 4 KiB pieces in 1448-byte segments", held: true, setup: viaProxy(middlebox(long, releasePieces(4<<10), 1448), "", 1)},
		corpusCase{name: "middlebox releasing 64 KiB pieces in 1448-byte segments", held: true, setup: viaProxy(middlebox(long, releasePieces(64<<10), 1448), "", 1)},
		corpusCase{name: "middlebox releasing at the end", held: true, setup: viaProxy(middlebox(c.refEngine, releaseAtEnd, 0), ref24, 1)},
		corpusCase{name: "middlebox releasing at the end in 1448-byte segments", held: true, setup: viaProxy(middlebox(c.refEngine, releaseAtEnd, 1448), ref24, 1)},
		corpusCase{name: "gzip middlebox flushing when its buffer fills, 24 tokens", held: true, setup: viaProxy(middlebox(c.refEngine, releaseGzip, 0), ref24, 1)},
		// Long enough for the compressed stream to fill the buffer several
		// times before the end.
		corpusCase{name: "gzip middlebox flushing when its buffer fills, 3000 events", held: true, setup: viaProxy(middlebox(scriptedEngine{events: 3000}.start, releaseGzip, 0), "", 1)},
	)
}

// streamFacts is what a record says about its stream's arrival.
type streamFacts struct {
	buffering           record.Buffering
	events, arrivals    int
	firstTogether       bool
	reason, detail, err string
}

// eventsPerPiece is the statistic of the buffering rule: content events
// per piece of the response beyond its headers and end; false for a stream
// too short to judge.
func (s streamFacts) eventsPerPiece() (float64, bool) {
	if s.events < 8 || s.arrivals == 0 {
		return 0, false
	}
	return float64(s.events) / float64(max(s.arrivals-2, 1)), true
}

func (s streamFacts) String() string {
	return fmt.Sprintf("%v: %d content events in %d arrivals, first together %v (%s/%s %s)",
		s.buffering.Kinds(), s.events, s.arrivals, s.firstTogether, s.reason, s.detail, s.err)
}

// factSink keeps the facts of every record.
type factSink struct {
	mu  sync.Mutex
	got []streamFacts
}

func (s *factSink) Emit(r *record.Record) {
	f := streamFacts{buffering: r.Buffering, events: r.Stream.ContentEvents, arrivals: r.Stream.Arrivals,
		firstTogether: r.Stream.FirstTogether, reason: r.Reason.String(), detail: string(r.Detail), err: r.Error}
	s.mu.Lock()
	s.got = append(s.got, f)
	s.mu.Unlock()
}

// take returns the facts kept so far and forgets them.
func (s *factSink) take() []streamFacts {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

// demoScenario returns the setup of one side of a demo scenario: the
// stack "ttftlens demo" starts (engine and proxy, and for
// buffered_downstream the buffering proxy in front), whose runs are the
// scenario's load with its fault.
func (c *corpus) demoScenario(sc lab.Scenario, injected bool) func(t *testing.T) func(t *testing.T) []streamFacts {
	return func(t *testing.T) func(t *testing.T) []streamFacts {
		ecfg := sc.Engine
		if injected && sc.InjectedEngine != nil {
			ecfg = *sc.InjectedEngine
		}
		load := sc.Load
		if injected && sc.Fault != "" {
			load.Header = http.Header{"X-Ttftlens-Fault": {sc.Fault}}
		}
		return c.labRuns(t, lab.StackConfig{Engine: ecfg}, load, injected && sc.Downstream)
	}
}

// demoEnd returns the setup of a demo end reason: its stack, whose runs
// are one request, as "ttftlens demo" sends.
func (c *corpus) demoEnd(ec lab.EndCase) func(t *testing.T) func(t *testing.T) []streamFacts {
	return func(t *testing.T) func(t *testing.T) []streamFacts {
		load := bench.Config{Concurrency: 1, Requests: 1, IgnoreEOS: true, Timeout: ec.Timeout,
			PromptTokens: bench.Dist{Min: 8, Max: 8}, OutputTokens: bench.Dist{Min: ec.MaxTokens, Max: ec.MaxTokens}}
		if ec.Fault != "" {
			load.Header = http.Header{"X-Ttftlens-Fault": {ec.Fault}}
		}
		return c.labRuns(t, lab.StackConfig{Proxy: ec.Proxy}, load, false)
	}
}

// labRuns returns runs of load through a lab stack with cfg's engine
// (behind the buffering proxy when downstream). Stacks without proxy
// settings are shared by engine configuration.
func (c *corpus) labRuns(t *testing.T, cfg lab.StackConfig, load bench.Config, downstream bool) func(t *testing.T) []streamFacts {
	key := fmt.Sprintf("%+v downstream=%v", cfg.Engine, downstream)
	if run, ok := c.stacks[key]; ok && cfg.Proxy == nil {
		return func(t *testing.T) []streamFacts { return run(t, load) }
	}
	sink := &factSink{}
	cfg.Sink = sink
	st, err := lab.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.t.Cleanup(func() { st.Close() })
	url := st.URL
	if downstream {
		bp, err := lab.StartBufferingProxy(st.URL)
		if err != nil {
			t.Fatal(err)
		}
		c.t.Cleanup(func() { bp.Close() })
		url = bp.URL
	}
	run := func(t *testing.T, load bench.Config) []streamFacts {
		load.URL, load.Admin = url, st.Admin
		res, err := load.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return sink.wait(t, len(res.Results))
	}
	if cfg.Proxy == nil {
		c.stacks[key] = run
	}
	return func(t *testing.T) []streamFacts { return run(t, load) }
}

// startFunc starts an upstream for the test and returns its base URL.
type startFunc func(t *testing.T) string

// viaProxy returns a case's setup: the upstream start makes, the proxy in
// front of it, and runs of conc concurrent streams with body ("": a chat
// request for the scripted engines) and the header pairs hdr.
func viaProxy(start startFunc, body string, conc int, hdr ...string) func(t *testing.T) func(t *testing.T) []streamFacts {
	if body == "" {
		body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	return func(t *testing.T) func(t *testing.T) []streamFacts {
		addr, sink := startProxy(t, start(t))
		return func(t *testing.T) []streamFacts {
			var wg sync.WaitGroup
			for range conc {
				wg.Go(func() {
					if err := postStream(addr, body, hdr...); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			return sink.wait(t, conc)
		}
	}
}

// startProxy runs a proxy in front of upstream until the test ends.
func startProxy(t *testing.T, upstream string) (string, *factSink) {
	sink := &factSink{}
	p, err := proxy.New(proxy.Config{Upstream: upstream, AllowFaults: true}, sink, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("proxy shutdown: %v", err)
		}
		<-done
	})
	return ln.Addr().String(), sink
}

// wait returns the facts of the next n records. A record is emitted just
// after its client read the end of the stream.
func (s *factSink) wait(t *testing.T, n int) []streamFacts {
	var got []streamFacts
	for deadline := time.Now().Add(30 * time.Second); len(got) < n; time.Sleep(time.Millisecond) {
		got = append(got, s.take()...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records within 30s", len(got), n)
		}
	}
	return got
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// postStream sends a chat request to the proxy and reads the whole answer.
func postStream(addr, body string, hdr ...string) error {
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// serve runs h on a loopback port until the test ends.
func serve(t *testing.T, h http.HandlerFunc) string {
	return serveOn(t, listen(t), h)
}

// serveOn runs h on ln until the test ends.
func serveOn(t *testing.T, ln net.Listener, h http.HandlerFunc) string {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// scriptedEngine is an OpenAI-compatible engine that streams events of
// OpenAI's shape, each written as it is produced, gap apart (jittered up
// to twice that). With coalesce, each event carries 2 to 8 words (an
// engine that coalesces tokens: vLLM's stream interval, detokenization in
// batches); with lag, about a third of the steps are written together with
// the next (an engine a step behind under load).
type scriptedEngine struct {
	events        int
	gap           time.Duration
	coalesce, lag bool
}

func (e scriptedEngine) start(t *testing.T) string {
	return serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Accel-Buffering", "no")
		fl := w.(http.Flusher)
		send := func(delta string, flush bool) {
			fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":null}]}`+"\n\n", delta)
			if flush {
				fl.Flush()
			}
		}
		send(`{"role":"assistant","content":""}`, true)
		for i := range e.events {
			words := 1
			if e.coalesce {
				words = 2 + rng.IntN(7)
			}
			var text strings.Builder
			for range words {
				text.WriteString(" " + vocabulary[rng.IntN(len(vocabulary))])
			}
			lagged := e.lag && i+1 < e.events && rng.IntN(3) == 0
			send(fmt.Sprintf(`{"content":"%s %x"}`, text.String(), rng.Uint32()), !lagged)
			if e.gap > 0 && !lagged {
				time.Sleep(e.gap + rand.N(e.gap))
			}
		}
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	})
}

var vocabulary = strings.Fields("the a of stream token engine proxy buffer first time model answer word story long short")

// middlebox returns an upstream start: target's upstream behind a reverse
// proxy that sends the response headers at once and the body as release
// writes it, in segments of at most mss bytes (0: the loopback's 64 KiB;
// 1448: an Ethernet link's, across which a piece arrives split).
func middlebox(target startFunc, release releaser, mss int) startFunc {
	return func(t *testing.T) string {
		up := target(t)
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		t.Cleanup(client.CloseIdleConnections)
		ln := listen(t)
		if mss > 0 {
			lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
				var err error
				if cerr := rc.Control(func(fd uintptr) {
					err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, mss)
				}); cerr != nil {
					return cerr
				}
				return err
			}}
			ln.Close()
			var err error
			if ln, err = lc.Listen(context.Background(), "tcp", "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
		}
		return serveOn(t, ln, func(w http.ResponseWriter, r *http.Request) {
			out, err := http.NewRequestWithContext(r.Context(), r.Method, up+r.URL.RequestURI(), r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			out.Header = r.Header.Clone()
			resp, err := client.Do(out)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.Header().Del("Content-Length")
			if release.encoding != "" {
				w.Header().Set("Content-Encoding", release.encoding)
			}
			w.WriteHeader(resp.StatusCode)
			w.(http.Flusher).Flush()
			release.write(w, resp.Body)
		})
	}
}

// releaser is how a middlebox writes a body on: its Content-Encoding, if
// any, and the writing.
type releaser struct {
	encoding string
	write    func(w http.ResponseWriter, body io.Reader)
}

// releasePieces holds the body and writes it in pieces of size bytes, each
// sent as soon as it is whole, the rest at the end.
func releasePieces(size int) releaser {
	return releaser{write: func(w http.ResponseWriter, body io.Reader) {
		buf := make([]byte, size)
		for {
			n, err := io.ReadFull(body, buf)
			_, _ = w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	}}
}

// releaseAtEnd holds the whole body and writes it at the end.
var releaseAtEnd = releaser{write: func(w http.ResponseWriter, body io.Reader) {
	b, _ := io.ReadAll(body)
	_, _ = w.Write(b)
}}

// releaseGzip compresses the body and never flushes: the compressor and
// the response writer send whenever their buffers fill.
var releaseGzip = releaser{encoding: "gzip", write: func(w http.ResponseWriter, body io.Reader) {
	zw := gzip.NewWriter(w)
	_, _ = io.Copy(zw, body)
	_ = zw.Close()
}}
