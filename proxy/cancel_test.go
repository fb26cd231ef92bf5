package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/refengine"
)

// maxCloseDelay is how soon after the client leaves the upstream must see
// its connection closed, at default settings.
const maxCloseDelay = 300 * time.Millisecond

// TestClientCancel checks that a client that leaves makes the proxy close
// the upstream connection promptly, in every phase, and that the record says
// client_cancel with the phase.
func TestClientCancel(t *testing.T) {
	tests := []struct {
		name  string
		phase endreason.Phase
		// upstream runs until the proxy closes the connection; started is
		// signalled when the client may leave.
		upstream func(c *upConn, started chan<- struct{})
		// readFirst: the client reads this before leaving.
		readFirst string
	}{
		{"before headers", endreason.PhaseUpstream, func(c *upConn, started chan<- struct{}) {
			close(started) // withhold headers: the proxy is inside the header wait
		}, ""},
		{"silent upstream", endreason.PhaseUpstream, func(c *upConn, started chan<- struct{}) {
			c.sse()
			c.role() // role chunk only: the first event, no token yet
			close(started)
		}, ""},
		{"mid-stream", endreason.PhaseDecoding, func(c *upConn, started chan<- struct{}) {
			c.role()
			close(started)
			for i := 0; ; i++ {
				if !c.content("tok ") {
					return
				}
				select {
				case at := <-c.gone:
					c.gone <- at // for the waitGone after this script
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}, "tok "},
	}
	serverTLS, clientTLS := testTLS(t)
	for _, useTLS := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if useTLS {
				name += " over TLS"
			}
			t.Run(name, func(t *testing.T) {
				started := make(chan struct{})
				closed := make(chan time.Time, 1)
				up := startUpstream(t, func(c *upConn) {
					tt.upstream(c, started)
					at, ok := c.waitGone(5 * time.Second)
					if ok {
						closed <- at
					}
				})
				var srvCfg, cliCfg *tls.Config
				if useTLS {
					srvCfg, cliCfg = serverTLS, clientTLS
				}
				addr, sink, _ := startProxyTLS(t, up.url, nil, srvCfg)
				conn, br := rawClientTLS(t, addr, chatBody, cliCfg)
				<-started
				if tt.readFirst != "" {
					readUntil(t, br, tt.readFirst)
				}
				time.Sleep(50 * time.Millisecond) // let the silence be real
				left := time.Now()
				conn.Close()

				select {
				case at := <-closed:
					if d := at.Sub(left); d > maxCloseDelay {
						t.Errorf("upstream saw the close %v after the client left; want <= %v", d, maxCloseDelay)
					}
				case <-time.After(3 * time.Second):
					t.Fatal("upstream connection still open 3s after the client left")
				}
				r := sink.next(t)
				if r.Reason != endreason.ClientCancel || r.Phase != tt.phase {
					t.Errorf("record %s/%s phase %s, want client_cancel phase %s", r.Reason, r.Detail, r.Phase, tt.phase)
				}
				if r.CancelToClose <= 0 || r.CancelToClose > maxCloseDelay {
					t.Errorf("cancel_to_close %v, want in (0, %v]", r.CancelToClose, maxCloseDelay)
				}
				sink.none(t, 50*time.Millisecond)
			})
		}
	}
}

// TestClientCancelKeepAlive: the disconnect registration is made once per
// client connection and moved from request to request; a client that leaves
// during the second request on a keep-alive connection still cancels that
// request (and closes its upstream), and the first ends normally.
func TestClientCancelKeepAlive(t *testing.T) {
	closed := make(chan time.Time, 1)
	var n atomic.Int32
	up := startUpstream(t, func(c *upConn) {
		if n.Add(1) == 1 {
			c.stream(2, 0)
			return
		}
		c.sse()
		c.role() // then silence: waiting on the upstream
		if at, ok := c.waitGone(5 * time.Second); ok {
			closed <- at
		}
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	conn, br := rawClient(t, addr, chatBody)
	readUntil(t, br, "0\r\n\r\n") // the first response's last chunk
	if r := sink.next(t); r.Reason != endreason.Stop {
		t.Fatalf("first request %s/%s", r.Reason, r.Detail)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	time.Sleep(100 * time.Millisecond)
	left := time.Now()
	conn.Close()
	select {
	case at := <-closed:
		if d := at.Sub(left); d > maxCloseDelay {
			t.Errorf("upstream closed %v after the client left", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("upstream still open 3s after the client left")
	}
	if r := sink.next(t); r.Reason != endreason.ClientCancel || r.Phase != endreason.PhaseUpstream {
		t.Errorf("second request %s/%s phase %s", r.Reason, r.Detail, r.Phase)
	}
}

// TestCancelPhaseFromEngine has a client leave while the reference engine
// holds its request in each phase before the first token, and checks that
// the record names the phase the engine was in: preparing (before its
// headers), queued and prefill (from its progress comments).
func TestCancelPhaseFromEngine(t *testing.T) {
	_, url := startEngine(t, refengine.Config{})
	addr, sink, _ := startProxy(t, url, func(c *Config) { c.Engine, c.AllowFaults = "reference", true })
	tests := []struct {
		fault  string
		stream bool
		// ready reports the engine holds the request in the phase; nil:
		// the phase begins as soon as the request is sent.
		ready func(waiting, running int) bool
		want  endreason.Phase
	}{
		{"slow_tokenizer=5s", true, nil, endreason.PhasePreparing},
		{"queue_delay=5s", true, func(w, _ int) bool { return w == 1 }, endreason.PhaseQueued},
		// Not streamed: no progress comments, and no headers until the
		// end, so no headers does not mean preparing. Nor under
		// hold_headers, which holds a stream's until the first token.
		{"slow_tokenizer=5s", false, nil, endreason.PhaseUpstream},
		{"hold_headers,queue_delay=5s", true, nil, endreason.PhaseUpstream},
		// Last: its steps take 1.2 s, and the engine finishes a step before
		// it notices the client left.
		{"straggler=0:200ms", true, func(_, r int) bool { return r == 1 }, endreason.PhasePrefill},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s stream=%v", tt.fault, tt.stream), func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"ttftlens-ref","stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, tt.stream)
			conn := dialProxy(t, addr)
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Ttftlens-Fault: %s\r\nContent-Length: %d\r\n\r\n%s", tt.fault, len(body), body)
			deadline := time.Now().Add(10 * time.Second)
			for tt.ready != nil && !tt.ready(scrapeEngineLoad(t, url)) {
				if time.Now().After(deadline) {
					t.Fatal("the engine never held the request in the phase")
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // the proxy reads the engine's word
			conn.Close()
			r := sink.next(t)
			if r.Reason != endreason.ClientCancel || r.Phase != tt.want {
				t.Errorf("record %s/%s phase %s, want client_cancel in %s", r.Reason, r.Detail, r.Phase, tt.want)
			}
		})
	}
}

// scrapeEngineLoad reads the engine's waiting and running gauges from its
// vLLM-named /metrics.
func scrapeEngineLoad(t *testing.T, url string) (waiting, running int) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, _ := strings.Cut(line, "{")
		_, v, _ := strings.Cut(rest, "} ")
		n, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "vllm:num_requests_waiting":
			waiting = int(n)
		case "vllm:num_requests_running":
			running = int(n)
		}
	}
	return waiting, running
}
