package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// childEnv, set, makes the test binary run as ttftlens (TestMain).
const childEnv = "TTFTLENS_CMD_TEST_CHILD"

// child is a ttftlens process a test started: its stderr's log lines and
// its stdout's records as they come, each channel closed at the stream's
// end.
type child struct {
	cmd     *exec.Cmd
	logs    <-chan map[string]any
	records <-chan string
}

// startChild runs the test binary as "ttftlens args...".
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs, records := make(chan map[string]any, 64), make(chan string, 64)
	go lines(stderr, func(l string) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			logs <- m
		}
	}, func() { close(logs) })
	go lines(stdout, func(l string) { records <- l }, func() { close(records) })
	return &child{cmd: cmd, logs: logs, records: records}
}

func lines(r io.Reader, each func(string), end func()) {
	defer end()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		each(sc.Text())
	}
}

// waitLog returns the next log line whose msg contains msg; the test fails
// when the process's stderr ends first.
func (c *child) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	for l := range c.logs {
		if m, _ := l["msg"].(string); strings.Contains(m, msg) {
			return l
		}
	}
	t.Fatalf("the process ended (%v) before logging %q", c.cmd.Wait(), msg)
	return nil
}

func (c *child) signal(t *testing.T, s os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		t.Fatal(err)
	}
}

// heldUpstream is an engine that holds each chat request until release
// receives (or the proxy leaves), after arrived received.
type heldUpstream struct {
	url              string
	arrived, release chan struct{}
}

func startHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{arrived: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body) // then a close of the connection ends r's context
		select {
		case u.arrived <- struct{}{}:
		case <-r.Context().Done(): // the proxy is gone
			return
		}
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// serveChild starts "ttftlens serve" in front of up, with more flags, and
// returns it with its client address once it serves; it logged its
// connection cap first.
func serveChild(t *testing.T, up *heldUpstream, flags ...string) (*child, string) {
	t.Helper()
	c := startChild(t, append([]string{"serve", "--upstream", up.url, "--engine", "generic", "--listen", "127.0.0.1:0",
		"--admin-listen", "127.0.0.1:0", "--scrape-engine-metrics", "0", "--log-level", "info"}, flags...)...)
	if n, _ := c.waitLog(t, "client connection cap")["max_conns"].(float64); n < 1 {
		t.Errorf("start log: connection cap %v, want the one in effect", n)
	}
	addr, _ := c.waitLog(t, "ttftlens serving")["listen"].(string)
	return c, addr
}

// held sends a chat request through addr and returns, once up holds it,
// the channel its status arrives on (0: no answer).
func (u *heldUpstream) held(t *testing.T, addr string) <-chan int {
	status := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			status <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	<-u.arrived
	return status
}

// record returns the process's next record line.
func (c *child) record(t *testing.T) string {
	t.Helper()
	r, ok := <-c.records
	if !ok {
		t.Fatal("no record: the process's stdout ended")
	}
	return r
}

// TestSighupWithoutConfig: SIGHUP to serve without --config, while a
// request is in flight and again during the SIGTERM drain, is logged and
// changes nothing: every request is answered and recorded, the process
// serves on, and exits 0 once drained.
func TestSighupWithoutConfig(t *testing.T) {
	up := startHeldUpstream(t)
	c, addr := serveChild(t, up)
	answered := func(status <-chan int) {
		t.Helper()
		up.release <- struct{}{}
		if s := <-status; s != http.StatusOK {
			t.Errorf("status %d, want 200", s)
		}
		c.record(t)
	}

	held := up.held(t, addr)
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "SIGHUP ignored")
	answered(held)
	answered(up.held(t, addr)) // a request after the SIGHUP

	held = up.held(t, addr)
	c.signal(t, syscall.SIGTERM)
	c.waitLog(t, "shutting down")
	c.signal(t, syscall.SIGHUP)
	c.waitLog(t, "SIGHUP ignored")
	answered(held)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("exit after the drain: %v, want status 0", err)
	}
}

// TestGraceCutExitsZero: a request still in flight at --shutdown-grace is
// cut and recorded deadline/shutdown, a warning says so, and the process
// exits 0: the stop went as the flag promises.
func TestGraceCutExitsZero(t *testing.T) {
	up := startHeldUpstream(t)
	c, addr := serveChild(t, up, "--shutdown-grace", "1ms")
	held := up.held(t, addr)
	c.signal(t, syscall.SIGTERM)
	c.waitLog(t, "requests cut at --shutdown-grace")
	if r := c.record(t); !strings.Contains(r, `"shutdown"`) {
		t.Errorf("record %s, want deadline/shutdown", r)
	}
	<-held
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("exit after a cut at the grace: %v, want status 0", err)
	}
}
