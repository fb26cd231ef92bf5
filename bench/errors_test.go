package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// deadURL is a loopback address nothing listens on (a listener opened and
// closed), so a connection to it is refused.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// hangUp is a server that accepts every request and closes the connection
// without an answer.
func hangUp(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// scripted serves the i-th request (from 0) with reply(i, w).
func scripted(t *testing.T, reply func(i int64, w http.ResponseWriter)) string {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply(n.Add(1)-1, w)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// stream writes an event stream of the given content tokens, finished.
func stream(w http.ResponseWriter, tokens int) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range tokens {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
}

// TestFailedRuns: failed requests are counted under their error texts, the
// most common shown; figures no request produced are n/a (null in JSON),
// never zero; a run where every request failed says so.
func TestFailedRuns(t *testing.T) {
	unauthorized := func(_ int64, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"invalid api key","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}
	tests := []struct {
		name       string
		url        string
		requests   int
		allFailed  bool
		errors     int
		topErrors  []string // substrings of TopErrors' texts, in order
		topCounts  []int
		textWant   []string
		textNot    []string
		rows       map[string]string // table row label → its values, single-spaced
		ttftNull   bool
		itlNull    bool
		endReasons string // the first end reason (client view)
	}{
		{
			name: "hung up", url: hangUp(t), requests: 5, allFailed: true, errors: 5,
			topErrors: []string{": EOF"}, topCounts: []int{5},
			textWant: []string{"errors:\n  5  Post ", ": EOF", "no request got a first token"},
			rows: map[string]string{"client TTFT": "n/a n/a n/a", "inter-token latency": "n/a n/a", "errors": "5",
				"completed requests/s": "0.00"},
			ttftNull: true, itlNull: true, endReasons: "error",
		},
		{
			name: "all 401", url: scripted(t, unauthorized), requests: 4, allFailed: true, errors: 4,
			topErrors: []string{"HTTP 401 Unauthorized: invalid api key"}, topCounts: []int{4},
			textWant: []string{"errors:\n  4  HTTP 401 Unauthorized: invalid api key\n"},
			rows: map[string]string{"client TTFT": "n/a n/a n/a", "inter-token latency": "n/a n/a",
				"completed requests/s": "0.00"},
			ttftNull: true, itlNull: true, endReasons: "http_401",
		},
		{
			name: "some failed", requests: 8, errors: 6,
			url: scripted(t, func(i int64, w http.ResponseWriter) {
				switch i % 4 {
				case 0:
					stream(w, 3)
				case 1, 2:
					http.Error(w, "upstream exploded\nsecond line", http.StatusBadGateway)
				default:
					w.WriteHeader(http.StatusTooManyRequests)
					fmt.Fprint(w, `{"error":"slow down"}`)
				}
			}),
			topErrors: []string{"HTTP 502 Bad Gateway: upstream exploded", "HTTP 429 Too Many Requests: slow down"},
			topCounts: []int{4, 2},
			textWant:  []string{"most common errors:\n  4  HTTP 502 Bad Gateway: upstream exploded\n  2  HTTP 429 Too Many Requests: slow down\n"},
			textNot:   []string{"n/a", "second line"},
		},
		{
			name: "one token each", requests: 2,
			url:      scripted(t, func(_ int64, w http.ResponseWriter) { stream(w, 1) }),
			textWant: []string{"no request got a second token"},
			rows:     map[string]string{"inter-token latency": "n/a n/a"},
			itlNull:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, err := Config{URL: tt.url, Requests: tt.requests, OutputTokens: Dist{3, 3}}.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := Summarize(run)
			var b strings.Builder
			s.WriteText(&b, "")
			text := b.String()
			defer func() {
				if t.Failed() {
					t.Log("\n" + text)
				}
			}()
			if s.AllFailed() != tt.allFailed || s.Errors != tt.errors {
				t.Errorf("AllFailed %v, %d errors; want %v, %d", s.AllFailed(), s.Errors, tt.allFailed, tt.errors)
			}
			if len(s.TopErrors) != len(tt.topErrors) {
				t.Fatalf("top errors %+v, want %q", s.TopErrors, tt.topErrors)
			}
			for i, e := range s.TopErrors {
				if !strings.Contains(e.Text, tt.topErrors[i]) || e.N != tt.topCounts[i] {
					t.Errorf("top error %d: %d × %q, want %d × %q", i, e.N, e.Text, tt.topCounts[i], tt.topErrors[i])
				}
			}
			for _, w := range tt.textWant {
				if !strings.Contains(text, w) {
					t.Errorf("text lacks %q", w)
				}
			}
			for label, want := range tt.rows {
				if got := row(text, label); got != want {
					t.Errorf("row %q: %q, want %q", label, got, want)
				}
			}
			for _, w := range tt.textNot {
				if strings.Contains(text, w) {
					t.Errorf("text has %q", w)
				}
			}
			if tt.endReasons != "" && s.EndReasons[0].Reason != tt.endReasons {
				t.Errorf("end reasons %+v, want %s first", s.EndReasons, tt.endReasons)
			}
			js, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				TTFT      map[string]*float64 `json:"client_ttft_ms"`
				ITL       map[string]*float64 `json:"inter_token_ms"`
				E2E       map[string]*float64 `json:"completion_ms"`
				TopErrors []ErrorCount        `json:"top_errors"`
			}
			if err := json.Unmarshal(js, &v); err != nil {
				t.Fatal(err)
			}
			if (v.TTFT["p50"] == nil) != tt.ttftNull || (v.TTFT["p99"] == nil) != tt.ttftNull || (v.ITL["p50"] == nil) != tt.itlNull {
				t.Errorf("JSON percentiles: %s", js)
			}
			if v.E2E["p50"] == nil || len(v.TopErrors) != len(tt.topErrors) {
				t.Errorf("JSON: %s", js)
			}
		})
	}
}

// row returns the values of the table row with label, single-spaced.
func row(text, label string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), label+" "); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return "(no row)"
}

func TestHTTPError(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   string
	}{
		{401, `{"error":{"message":"invalid api key","code":"invalid_api_key"}}`, "HTTP 401 Unauthorized: invalid api key"},
		{429, `{"error":"slow down"}`, "HTTP 429 Too Many Requests: slow down"},
		{500, "boom\ntrace", "HTTP 500 Internal Server Error: boom"},
		{503, "", "HTTP 503 Service Unavailable"},
		{404, `{"detail":"Not Found"}`, `HTTP 404 Not Found: {"detail":"Not Found"}`},
		{400, `{"error":{"code":"x"}}`, "HTTP 400 Bad Request"},
		{599, "  ", "HTTP 599"},
	}
	for _, tt := range tests {
		if got := httpError(tt.status, []byte(tt.body)); got != tt.want {
			t.Errorf("httpError(%d, %q) = %q, want %q", tt.status, tt.body, got, tt.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		r    Result
		want string
	}{
		{Result{End: "cut", Err: "read tcp 127.0.0.1:53412->127.0.0.1:8080: read: connection reset by peer"},
			"read tcp 127.0.0.1:*->127.0.0.1:8080: read: connection reset by peer"},
		{Result{End: "cut", Err: "read tcp [::1]:40001->[::1]:8080: i/o timeout"}, "read tcp [::1]:*->[::1]:8080: i/o timeout"},
		{Result{End: "cut"}, "the stream ended without [DONE] or a finish_reason"},
		{Result{End: "timeout"}, "no complete response within --timeout"},
		{Result{End: "http_418"}, "HTTP 418"},
		{Result{End: "error_event", Err: `{"message":"oops"}`}, `{"message":"oops"}`},
	}
	for _, tt := range tests {
		if got := tt.r.ErrorText(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.r, got, tt.want)
		}
	}
}

func TestSweepErrors(t *testing.T) {
	url := hangUp(t)
	var rows []SweepRow
	for _, c := range []int{1, 2} {
		run, err := Config{URL: url, Requests: 2, Concurrency: c}.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, SweepRow{Concurrency: c, Summary: Summarize(run)})
	}
	var b strings.Builder
	WriteSweep(&b, rows)
	for _, w := range []string{"n/a", "concurrency 1, errors:\n  2  Post ", "concurrency 2, errors:\n"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("sweep lacks %q:\n%s", w, b.String())
		}
	}
}

// TestUnreachable: a server that refuses connections ends the run before
// any load, with the cause in the error.
func TestUnreachable(t *testing.T) {
	dead := deadURL(t)
	for _, cfg := range []Config{
		{URL: dead, Requests: 3},
		{URL: dead + "/", Rate: 100, Duration: 10 * time.Second, Admin: dead},
	} {
		run, err := cfg.Run(context.Background())
		var ue *UnreachableError
		if run != nil || !errors.As(err, &ue) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%+v: run %v, error %v; want an UnreachableError for connection refused", cfg, run, err)
		}
		if want := "cannot reach " + cfg.URL + ": connection refused"; err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	}
}

// TestRequestsPerSecCountsCompleted: failed requests are not throughput.
func TestRequestsPerSecCountsCompleted(t *testing.T) {
	done, failed := Result{End: "done"}, Result{End: "error", Err: "EOF"}
	tests := []struct {
		name    string
		results []Result
		want    float64
	}{
		{"all complete", []Result{done, done, done, done}, 2},
		{"half failed", []Result{done, failed, done, failed}, 1},
		{"all failed", []Result{failed, failed, failed, failed}, 0},
		{"warm-up left out", []Result{{End: "done", Warmup: true}, done, failed}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(&Run{Results: tt.results, Elapsed: 2 * time.Second})
			if s.RequestsPerSec != tt.want {
				t.Errorf("requests/s %v, want %v", s.RequestsPerSec, tt.want)
			}
		})
	}
}

// countingAdmin is an admin endpoint that knows no request and counts the
// record fetches per request id.
func countingAdmin(t *testing.T) (url string, fetched func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/debug/requests/"); ok {
			mu.Lock()
			seen[id]++
			mu.Unlock()
			http.Error(w, `{"error":{"code":"unknown_request_id"}}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"recent":[],"slowest":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// apiRefused fails the API requests (/v1/...) as a refused connection
// would, and sends the others (the admin endpoint's) on.
type apiRefused struct{ *http.Transport }

func (a apiRefused) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return a.Transport.RoundTrip(r)
}

// TestJoinSkipped: a request that never reached the server is not looked
// up, and once the admin endpoint had no record of a request while none
// was found, the rest are not looked up either (each would wait out the
// joiner's retries); the run says why nothing was joined.
func TestJoinSkipped(t *testing.T) {
	tests := []struct {
		name       string
		transport  http.RoundTripper
		maxFetched int    // request ids looked up
		note       string // in the run's join note ("": no note)
	}{
		{"never sent", apiRefused{&http.Transport{}}, 0, ""},
		// Two join workers: each may be waiting on a request when the other's miss is known.
		{"admin without records", nil, 2, "has no record of request bench-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			admin, fetched := countingAdmin(t)
			api := scripted(t, func(_ int64, w http.ResponseWriter) { stream(w, 2) })
			run, err := Config{URL: api, Admin: admin, Requests: 6, OutputTokens: Dist{2, 2}, Transport: tt.transport}.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if a, ok := tt.transport.(apiRefused); ok {
				a.CloseIdleConnections()
			}
			s := Summarize(run)
			got := fetched()
			noteOK := strings.Contains(s.JoinNote, tt.note) && (tt.note != "" || s.JoinNote == "")
			if len(got) > tt.maxFetched || s.Joined != 0 || !noteOK {
				t.Errorf("looked up %v (at most %d wanted), joined %d, note %q (want %q)", got, tt.maxFetched, s.Joined, s.JoinNote, tt.note)
			}
		})
	}
}
