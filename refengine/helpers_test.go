package refengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a small, fast configuration that takes faults from requests.
func testConfig() Config {
	return Config{KVBlocks: 256, MaxRunning: 8, TokenizerWorkers: 2, AllowFaults: true}
}

type testEngine struct {
	*Server
	ts     *httptest.Server
	client *http.Client
}

func startEngine(t testing.TB, cfg Config) *testEngine {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	e := &testEngine{Server: s, ts: ts, client: ts.Client()}
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return e
}

// post sends a JSON body to path with optional headers (name, value pairs).
func (e *testEngine) post(t testing.TB, ctx context.Context, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseItem is one parsed item of an event stream: a data event or a comment.
type sseItem struct {
	comment bool
	data    string
	at      time.Duration // since the request was sent
}

// readSSE parses an event stream until EOF (or error), timestamping items
// relative to start. err is the read error other than io.EOF.
func readSSE(r io.Reader, start time.Time) (items []sseItem, err error) {
	br := bufio.NewReader(r)
	var data []string
	for {
		line, rerr := br.ReadString('\n')
		if rerr != nil {
			if rerr == io.EOF {
				rerr = nil
			}
			return items, rerr
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != nil {
				items = append(items, sseItem{data: strings.Join(data, "\n"), at: time.Since(start)})
				data = nil
			}
		case strings.HasPrefix(line, ": ttftlens-phase "):
			// progress comments: TestProgressComments reads them
		case strings.HasPrefix(line, ":"):
			items = append(items, sseItem{comment: true, data: strings.TrimPrefix(strings.TrimPrefix(line, ":"), " "), at: time.Since(start)})
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// chunk is the union of the stream chunk shapes.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func mustChunk(t testing.TB, s string) chunk {
	t.Helper()
	var c chunk
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("chunk %q: %v", s, err)
	}
	return c
}

// parseServerTiming parses "name;dur=ms, ..." into durations.
func parseServerTiming(t testing.TB, v string) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for item := range strings.SplitSeq(v, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(item), ";dur=")
		if !ok {
			t.Fatalf("server-timing item %q", item)
		}
		ms, err := strconv.ParseFloat(dur, 64)
		if err != nil {
			t.Fatalf("server-timing item %q: %v", item, err)
		}
		out[name] = time.Duration(ms * float64(time.Millisecond))
	}
	return out
}

func chatBody(content string, extra string) string {
	b, _ := json.Marshal(content)
	s := `{"model":"ttftlens-ref","messages":[{"role":"user","content":` + string(b) + `}]`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func readAll(t testing.TB, r io.Reader) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// signalOn is a reader of r that closes seen once s has gone by.
type signalOn struct {
	r    io.Reader
	s    string
	seen chan struct{}
	tail []byte // the last bytes read, to find s across reads
	done bool
}

func (r *signalOn) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if !r.done {
		r.tail = append(r.tail, p[:n]...)
		if strings.Contains(string(r.tail), r.s) {
			r.done = true
			close(r.seen)
		} else {
			r.tail = r.tail[max(0, len(r.tail)-len(r.s)+1):]
		}
	}
	return n, err
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, cond func() bool) bool {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return cond()
}
