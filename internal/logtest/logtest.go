// Package logtest captures JSON log lines (zerolog's) for tests that check
// what operators would read.
package logtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Lines is an io.Writer that keeps the lines written to it; safe for the
// goroutines a logger is used from.
type Lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far, as written.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// All returns every line kept, decoded; a line that is not a JSON object
// fails the test.
func (l *Lines) All(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	return decode(t, l.buf.String())
}

// Take returns the lines written since the last Take, decoded, and forgets
// them.
func (l *Lines) Take(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := decode(t, l.buf.String())
	l.buf.Reset()
	return out
}

func decode(t testing.TB, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// With returns the lines whose message (zerolog.MessageFieldName) is msg.
func (l *Lines) With(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range l.All(t) {
		if m[zerolog.MessageFieldName] == msg {
			out = append(out, m)
		}
	}
	return out
}

// WaitFor waits up to 10 s until n lines say msg, calling poke (if any)
// between looks, and returns them.
func (l *Lines) WaitFor(t testing.TB, msg string, n int, poke func()) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := l.With(t, msg); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines %q within 10s; log: %v", n, msg, l.All(t))
		}
		if poke != nil {
			poke()
		}
		time.Sleep(5 * time.Millisecond)
	}
}
