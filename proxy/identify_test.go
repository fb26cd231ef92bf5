package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

// transcript is a recorded upstream response (proxy/engines/testdata; its
// README cites the source of each shape).
type transcript struct {
	status int
	header http.Header
	body   []byte
}

func readTranscript(t *testing.T, path string) transcript {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return transcript{status: resp.StatusCode, header: resp.Header, body: body}
}

// blocks splits a stream body as the relay does: SSE events or NDJSON lines.
// timing marks the blocks that only carry the engine's in-band timing
// comment, which the relay consumes.
func (tr transcript) blocks(t *testing.T) (raw, data, timing [][]byte) {
	if strings.Contains(tr.header.Get("Content-Type"), "ndjson") {
		sc := engines.NewLineScanner(bytes.NewReader(tr.body), 0)
		for {
			r, line, err := sc.Next()
			if err != nil {
				return
			}
			raw, data, timing = append(raw, bytes.Clone(r)), append(data, bytes.Clone(line)), append(timing, nil)
		}
	}
	sc := sse.NewScanner(bytes.NewReader(tr.body), 0)
	for {
		ev, err := sc.Next()
		if err != nil {
			return
		}
		raw = append(raw, bytes.Clone(ev.Raw))
		var d, tm []byte
		if ev.HasData {
			d = bytes.Clone(ev.Data)
		} else if bytes.HasPrefix(ev.Comment, engines.ServerTimingPrefix) {
			tm = bytes.Clone(ev.Comment[len(engines.ServerTimingPrefix):])
		}
		data, timing = append(data, d), append(timing, tm)
	}
}

func (tr transcript) stream() bool {
	ct := tr.header.Get("Content-Type")
	return strings.Contains(ct, "event-stream") || strings.Contains(ct, "ndjson")
}

// oracle is what the kind's reader (and the timing protocol) find in the
// transcript on their own: the engine durations the proxy must attribute,
// and whether the engine reported a failure.
func (tr transcript) oracle(t *testing.T, kind string) (tl stages.Timeline, failed bool) {
	r, err := engines.NewReader(kind)
	if err != nil {
		t.Fatal(err)
	}
	tl.Start(func() int64 { return 0 }, time.Time{})
	h := func(name string) []byte { return []byte(tr.header.Get(name)) }
	r.Header(h, &tl)
	engines.ParseServerTiming([]byte(tr.header.Get("Server-Timing")), &tl)
	look := func(ev engines.Event) {
		failed = failed || ev.Error || ev.Finish == endreason.FinishAbort || ev.Finish == endreason.FinishError
	}
	if !tr.stream() {
		look(r.Event(tr.body, &tl))
		return tl, failed || tr.status >= 500
	}
	_, data, timing := tr.blocks(t)
	for i, d := range data {
		if timing[i] != nil {
			engines.ParseServerTiming(timing[i], &tl)
		}
		if d != nil {
			look(r.Event(d, &tl))
		}
	}
	return tl, failed
}

// TestEngineTranscripts replays every engine transcript through the proxy
// with realistic timing (a few ms between events) and checks: the engine
// durations in the record are those the engine reported (measured ones
// exactly; an inferred queue is flagged), the client gets the upstream's
// bytes unchanged (except vLLM's usage chunk when the proxy asked for it),
// and the end reason fits the transcript.
func TestEngineTranscripts(t *testing.T) {
	files, _ := filepath.Glob("engines/testdata/*/*.txt")
	if len(files) < 20 {
		t.Fatalf("found %d transcripts", len(files))
	}
	for _, file := range files {
		kind := filepath.Base(filepath.Dir(file))
		name := kind + "/" + strings.TrimSuffix(filepath.Base(file), ".txt")
		t.Run(name, func(t *testing.T) {
			tr := readTranscript(t, file)
			var sentBody string
			up := startUpstream(t, func(c *upConn) {
				sentBody = c.body
				if !tr.stream() {
					c.write(wholeResponse(tr)) // with its engine headers (TGI)
					return
				}
				raw, _, _ := tr.blocks(t)
				c.headers(tr.status, tr.header.Get("Content-Type"), extraHeaders(tr.header)...)
				for _, b := range raw {
					if !c.chunk(string(b)) {
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
				c.end()
			})
			engineKind := kind
			if kind == engines.KindAnthropic {
				engineKind = engines.KindGeneric // the path picks the reader
			}
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.Engine = engineKind })
			path, body := requestFor(kind, file)
			resp, got, err := postPath(t, addr, path, body)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			r := sink.next(t)
			want, wantFailure := tr.oracle(t, kind)

			// Engine durations: the proxy attributes what the engine said.
			for d := stages.EngineDur(0); d < stages.NumEngineDurs; d++ {
				w, wok := want.Engine(d)
				g, gok := r.Timeline.Engine(d)
				if d == stages.EngineQueue && !wok && r.Timeline.Inferred().Has(d) {
					continue // inferred by the proxy from its own marks
				}
				if wok != gok || w != g {
					t.Errorf("engine %s: record %v (%v), transcript %v (%v)", d, g, gok, w, wok)
				}
			}
			if want.EngineReported() && r.EngineSource != kind && r.EngineSource != "server-timing" {
				t.Errorf("engine_report %q, want %q", r.EngineSource, kind)
			}
			// What the client got.
			dropUsage := kind == engines.KindVLLM && tr.stream() && r.Streaming
			if dropUsage && !strings.Contains(sentBody, `"include_usage":true`) {
				t.Errorf("vLLM was not asked for usage: %s", sentBody)
			}
			wantBody := string(tr.body)
			if tr.stream() {
				wantBody = forwarded(t, tr, dropUsage)
			}
			if tr.status < 300 && got != wantBody {
				t.Errorf("client body differs from the upstream's:\n got %q\nwant %q", got, wantBody)
			}
			if resp.StatusCode != tr.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tr.status)
			}
			if gotFailure := r.Reason == endreason.WorkerFailure || r.Reason == endreason.UpstreamDisconnect; gotFailure != wantFailure {
				t.Errorf("record %s/%s (%s), failure expected: %v", r.Reason, r.Detail, r.Error, wantFailure)
			}
		})
	}
}

// requestFor is the client request each protocol's transcript answers.
func requestFor(kind, file string) (path, body string) {
	stream := !strings.Contains(file, "whole")
	s := "false"
	if stream {
		s = "true"
	}
	switch {
	case kind == engines.KindAnthropic:
		return "/v1/messages", `{"model":"claude","max_tokens":64,"stream":` + s + `,"messages":[{"role":"user","content":"hi"}]}`
	case kind == engines.KindOllama && strings.Contains(file, "generate"):
		return "/api/generate", `{"model":"llama3.2","prompt":"hi","stream":` + s + `}`
	case kind == engines.KindOllama:
		return "/api/chat", `{"model":"llama3.2","stream":` + s + `,"messages":[{"role":"user","content":"hi"}]}`
	case (kind == engines.KindSGLang || kind == engines.KindTGI) && strings.Contains(file, "generate"):
		return "/generate", `{"text":"hi","stream":` + s + `}`
	case strings.Contains(file, "completion_native"):
		return "/completion", `{"prompt":"hi","stream":` + s + `}`
	}
	return "/v1/chat/completions", `{"model":"m","stream":` + s + `,"messages":[{"role":"user","content":"hi"}]}`
}

// extraHeaders returns the transcript's headers other than framing ones.
func extraHeaders(h http.Header) []string {
	var out []string
	for k, vs := range h {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Type", "Content-Length", "Transfer-Encoding", "Date":
			continue
		}
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// wholeResponse is the transcript as one response with a Content-Length.
func wholeResponse(tr transcript) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", tr.status, http.StatusText(tr.status), tr.header.Get("Content-Type"))
	for _, h := range extraHeaders(tr.header) {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(tr.body), tr.body)
	return b.String()
}

// forwarded is what the client must receive of a streamed transcript: every
// block but the engine's timing comments (the relay consumes them) and, when
// the proxy asked vLLM for usage, its usage-only chunks.
func forwarded(t *testing.T, tr transcript, dropUsage bool) string {
	raw, data, timing := tr.blocks(t)
	var b strings.Builder
	for i := range raw {
		if timing[i] != nil || dropUsage && data[i] != nil && engines.IsUsageOnlyChunk(data[i]) {
			continue
		}
		b.Write(raw[i])
	}
	return b.String()
}
