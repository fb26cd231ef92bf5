package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBenchCommand: a run whose every request failed shows the errors,
// n/a for what no request produced, and exits 1; a good run exits 0.
func TestBenchCommand(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer ok.Close()
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"missing API key","code":"missing_api_key"}}`)
	}))
	defer unauthorized.Close()
	// hangUp accepts each request and closes the connection without an answer.
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer hangUp.Close()

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"all hung up", []string{"--url", hangUp.URL, "-n", "3"}, 1,
			[]string{"errors:\n  3  Post ", ": EOF", "n/a", "!TTFT  0.00", "completed requests/s"},
			[]string{"ttftlens bench: all 3 requests failed (Post "}},
		{"one request hung up", []string{"--url", hangUp.URL, "-n", "1"}, 1, nil,
			[]string{"ttftlens bench: the request failed (Post "}},
		{"all 401", []string{"--url", unauthorized.URL, "-n", "2"}, 1,
			[]string{"errors:\n  2  HTTP 401 Unauthorized: missing API key\n", "n/a", "http_401"},
			[]string{"ttftlens bench: all 2 requests failed (HTTP 401 Unauthorized: missing API key)"}},
		{"all failed, JSON", []string{"--url", unauthorized.URL, "-n", "2", "--json"}, 1,
			[]string{`"requests_per_s":0,`, `"client_ttft_ms":{"p50":null,"p90":null,"p99":null}`, `"top_errors":[{"error":"HTTP 401 `},
			[]string{"all 2 requests failed"}},
		{"sweep, all failed", []string{"--url", unauthorized.URL, "-n", "2", "--sweep", "1,2"}, 1,
			[]string{"concurrency 1, errors:", "concurrency 2, errors:", "n/a"},
			[]string{"all 4 requests failed"}},
		{"good run", []string{"--url", ok.URL, "-n", "3"}, 0,
			[]string{"client TTFT", "!n/a", "!most common errors", "!errors:"}, []string{"!failed"}},
		{"good run, JSON", []string{"--url", ok.URL, "-n", "3", "--json"}, 0,
			[]string{`"requests":3,"errors":0,`, `"requests_per_s":`, `!"requests_per_s":0,`}, []string{"!failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"bench", "--admin", ""}, tt.args...)
			runCLI("", args...).check(t, tt.code, tt.stdout, tt.stderr)
		})
	}
}

// TestBenchUnreachable: against a closed port every form of the run ends
// before any load with one line and exit status 1 (a sweep's progress
// heading before it), whether or not the admin endpoint is there.
func TestBenchUnreachable(t *testing.T) {
	dead := deadURL(t)
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"code":"unknown_request_id"}}`, http.StatusNotFound)
	}))
	defer admin.Close()
	failure := "ttftlens bench: cannot reach " + dead + ": connection refused\n"
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"-n", "3", "--admin", ""}, failure},
		{[]string{"-n", "3", "--admin", admin.URL}, failure},
		{[]string{"-n", "3", "--admin", dead}, failure},
		{[]string{"-n", "3", "--json"}, failure},
		{[]string{"-n", "2", "--sweep", "1,2"}, "bench: concurrency 1\n" + failure},
		{[]string{"-d", "10s", "--rate", "50"}, failure},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runCLI("", append([]string{"bench", "--url", dead}, tt.args...)...)
			if r.code != 1 || r.stdout != "" || r.err != tt.stderr {
				t.Errorf("exit status %d, stdout %q, stderr %q; want 1, nothing, %q", r.code, r.stdout, r.err, tt.stderr)
			}
		})
	}
}
