package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
	dead := deadURL(t)

	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"dead url", []string{"--url", dead, "-n", "3"}, 1,
			[]string{"errors:\n  3  Post ", "connection refused", "n/a", "!TTFT  0.00"},
			[]string{"ttftlens: bench: all 3 requests failed (Post "}},
		{"dead url, one request", []string{"--url", dead, "-n", "1"}, 1, nil,
			[]string{"ttftlens: bench: the request failed (Post "}},
		{"all 401", []string{"--url", unauthorized.URL, "-n", "2"}, 1,
			[]string{"errors:\n  2  HTTP 401 Unauthorized: missing API key\n", "n/a", "http_401"},
			[]string{"ttftlens: bench: all 2 requests failed (HTTP 401 Unauthorized: missing API key)"}},
		{"all failed, JSON", []string{"--url", dead, "-n", "2", "--json"}, 1,
			[]string{`"client_ttft_ms":{"p50":null,"p90":null,"p99":null}`, `"top_errors":[{"error":"Post `},
			[]string{"all 2 requests failed"}},
		{"sweep, all failed", []string{"--url", dead, "-n", "2", "--sweep", "1,2"}, 1,
			[]string{"concurrency 1, errors:", "concurrency 2, errors:", "n/a"},
			[]string{"all 4 requests failed"}},
		{"good run", []string{"--url", ok.URL, "-n", "3"}, 0,
			[]string{"client TTFT", "!n/a", "!most common errors", "!errors:"}, []string{"!failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"bench", "--admin", ""}, tt.args...)
			runCLI("", args...).check(t, tt.code, tt.stdout, tt.stderr)
		})
	}
}
