package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/logtest"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/stages"
)

// serveTranscript answers c with tr as the engine sent it, a few ms
// between a stream's blocks.
func serveTranscript(t *testing.T, c *upConn, tr transcript) {
	if !tr.stream() {
		c.write(wholeResponse(tr))
		return
	}
	raw, _, _ := tr.blocks(t)
	c.headers(tr.status, tr.header.Get("Content-Type"), extraHeaders(tr.header)...)
	for _, b := range raw {
		if !c.chunk(string(b)) {
			return
		}
		time.Sleep(2 * time.Millisecond) // the engine's pace, not a synchronisation
	}
	c.end()
}

// checkEngineDurations holds the record's engine durations to what the
// transcript reports (the queue the proxy inferred aside).
func checkEngineDurations(t *testing.T, r gotRecord, want stages.Timeline) {
	t.Helper()
	for d := stages.EngineDur(0); d < stages.NumEngineDurs; d++ {
		w, wok := want.Engine(d)
		g, gok := r.Timeline.Engine(d)
		if !wok && r.Timeline.Inferred().Has(d) {
			continue
		}
		if wok != gok || w != g {
			t.Errorf("engine %s: record %v (%v), transcript %v (%v)", d, g, gok, w, wok)
		}
	}
}

// TestFirstRequestSplit: the first request to a freshly started llama.cpp-,
// vLLM- or Ollama-shaped upstream, whose engine /v1/models cannot tell yet
// (it answers 503 without an engine's mark, so --engine auto keeps
// retrying), is split all the same: its response names the engine (llama.cpp's
// timings, vLLM's metrics, Ollama's last line on its own /api path), the
// record carries the engine's durations under its name, and, where the
// generic reader recognised the engine, the upstream's kind is settled
// from it, so the second request is read by that engine's reader.
func TestFirstRequestSplit(t *testing.T) {
	tests := []struct {
		file, path, body string
		learned          string // the upstream's kind after the first request
	}{
		{"llamacpp/chat_stream.txt", "/v1/chat/completions",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, engines.KindLlamaCpp},
		{"vllm/chat_stream_metrics.txt", "/v1/chat/completions", // the client asks for usage: see docs/engines.md
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, engines.KindVLLM},
		{"ollama/chat_stream.txt", "/api/chat", // the path picks Ollama's reader; the upstream stays unidentified
			`{"model":"llama3.2","stream":true,"messages":[{"role":"user","content":"hi"}]}`, ""},
	}
	for _, tt := range tests {
		kind := strings.Split(tt.file, "/")[0]
		t.Run(kind, func(t *testing.T) {
			tr := readTranscript(t, "engines/testdata/"+tt.file)
			up := startUpstream(t, func(c *upConn) {
				if c.req.URL.Path == "/v1/models" {
					c.write("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
					return
				}
				serveTranscript(t, c, tr)
			})
			logs := &logtest.Lines{}
			sink := newCaptureSink(t)
			p, err := New(Config{Upstream: up.url, UpstreamName: "engine", Engine: EngineAuto, ScrapeEngineMetrics: -1}, sink, zerolog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			addr := serveProxy(t, p, nil)
			logs.WaitFor(t, msgNotReady, 1, nil) // identification ran, and could not tell
			want, _ := tr.oracle(t, kind)
			for i := range 2 {
				resp, got, err := postPath(t, addr, tt.path, tt.body)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %v %v", i+1, resp, err)
				}
				if wantBody := forwarded(t, tr, false); got != wantBody {
					t.Errorf("request %d: client body differs from the upstream's:\n got %q\nwant %q", i+1, got, wantBody)
				}
				r := sink.next(t)
				if r.bd.Unsplit || r.EngineSource != kind {
					t.Errorf("request %d: unsplit %v, engine_report %q; want split by %s", i+1, r.bd.Unsplit, r.EngineSource, kind)
				}
				checkEngineDurations(t, r, want)
				c, _ := p.clients.Load(up.url)
				if k := c.(*upstream).kind.v.Load(); tt.learned == "" && k != nil || tt.learned != "" && (k == nil || *k != tt.learned) {
					t.Errorf("after request %d: the upstream's kind is %v, want %q", i+1, k, tt.learned)
				}
			}
			if got := logs.With(t, "engine recognised from its response"); tt.learned != "" && (len(got) != 1 || got[0]["engine"] != tt.learned || got[0]["upstream"] != "engine") {
				t.Errorf("logged %v, want one line naming %s", got, tt.learned)
			}
		})
	}
}

// TestIdentifiedAtStart: with --engine auto the proxy asks each upstream
// what it is as soon as it starts, before any request: the upstream sees
// GET /v1/models and nothing else, and the first request is read by the
// engine's own reader.
func TestIdentifiedAtStart(t *testing.T) {
	tr := readTranscript(t, "engines/testdata/llamacpp/chat_stream.txt")
	paths := make(chan string, 10)
	up := startUpstream(t, func(c *upConn) {
		paths <- c.req.URL.Path
		if c.req.URL.Path == "/v1/models" {
			body := `{"object":"list","data":[{"id":"m","object":"model","owned_by":"llamacpp"}]}`
			c.write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			return
		}
		serveTranscript(t, c, tr)
	})
	logs := &logtest.Lines{}
	sink := newCaptureSink(t)
	p, err := New(Config{Upstream: up.url, Engine: EngineAuto, ScrapeEngineMetrics: -1}, sink, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	addr := serveProxy(t, p, nil)
	if got := logs.WaitFor(t, msgIdentified, 1, nil); got[0]["engine"] != engines.KindLlamaCpp {
		t.Fatalf("identified: %v", got)
	}
	if got := <-paths; got != "/v1/models" || len(paths) != 0 {
		t.Fatalf("before any request the upstream saw %s (and %d more)", got, len(paths))
	}
	if _, _, err := post(t, addr, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`); err != nil {
		t.Fatal(err)
	}
	if r := sink.next(t); r.bd.Unsplit || r.EngineSource != engines.KindLlamaCpp {
		t.Errorf("first request: unsplit %v, engine_report %q", r.bd.Unsplit, r.EngineSource)
	}
}

// TestIdentifiedOnHealthProbe: an upstream down when the proxy starts is
// identified when its health probe first passes, not at identification's
// next retry (a second away; all timers are on a fake clock, which the
// test moves only a quarter of that).
func TestIdentifiedOnHealthProbe(t *testing.T) {
	addr := closedAddr(t)
	clk := &clock.Fake{}
	cfg, err := gateway.Parse([]byte(`
routes: [{model: "*", pool: p}]
pools:
  - name: p
    upstreams: [http://`+addr+`]
    health: {path: /health, interval: 1h}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Lines{}
	log := zerolog.New(logs)
	gw, err := gateway.New(cfg, gateway.Options{Clock: clk, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	t.Cleanup(gw.Stop)
	p, err := New(Config{Gateway: gw, Engine: EngineAuto, Clock: clk, ScrapeEngineMetrics: -1}, newCaptureSink(t), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	logs.WaitFor(t, msgNotUnreachable, 1, nil)
	logs.WaitFor(t, "upstream unhealthy", 1, nil)
	clk.WaitArmed(2) // the probe's retry, 100 ms away, and identification's

	serveAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, vllmModels)
		}
	}))
	clk.Advance(100 * time.Millisecond) // the probe passes...
	logs.WaitFor(t, "upstream recovered", 1, nil)
	clk.Advance(150 * time.Millisecond) // ...and identification, past its least wait, goes at once
	if got := logs.WaitFor(t, msgIdentified, 1, nil); got[0]["engine"] != engines.KindVLLM {
		t.Errorf("identified: %v", got)
	}
}
