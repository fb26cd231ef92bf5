package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/refengine"
)

// TestClientCancel checks that a client that leaves makes the proxy cut the
// upstream connection, in every phase, and that the record says
// client_cancel with the phase. The cause is the client's leaving and
// nothing else: the upstream is silent or still generating when the client
// leaves, no deadline is near, and the record shows the proxy cut the
// upstream for the cancel (cancel_to_close) before the upstream could end
// its stream. How soon it does is BenchmarkCancelToUpstreamClose's figure.
func TestClientCancel(t *testing.T) {
	// generation is how many tokens the mid-stream upstream still sends
	// after the client read the first: the proxy must have cut it first.
	const generation = 100
	tests := []struct {
		name  string
		phase endreason.Phase
		// upstream runs until the proxy closes the connection, or ends
		// its stream normally and returns false.
		upstream func(c *upConn) bool
		// readFirst: the client reads this before leaving.
		readFirst string
	}{
		{"before headers", endreason.PhaseUpstream, func(c *upConn) bool { return true }, ""}, // withhold headers: the proxy waits for them
		{"silent upstream", endreason.PhaseUpstream, func(c *upConn) bool {
			c.sse()
			return c.role() // role chunk only: the first event, no token yet
		}, `"assistant"`},
		{"mid-stream", endreason.PhaseDecoding, func(c *upConn) bool {
			c.role()
			for range generation {
				if !c.content("tok ") {
					return true
				}
				select {
				case at := <-c.gone:
					c.gone <- at // for the waitGone after this script
					return true
				case <-time.After(20 * time.Millisecond): // a live engine's pace
				}
			}
			c.finish("stop")
			c.done()
			c.end()
			return false
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
				closed := make(chan bool, 1) // the proxy closed the connection before the stream's end
				up := startUpstream(t, func(c *upConn) {
					cut := tt.upstream(c)
					_, ok := c.waitGone(10 * time.Second)
					closed <- cut && ok
				})
				var srvCfg, cliCfg *tls.Config
				if useTLS {
					srvCfg, cliCfg = serverTLS, clientTLS
				}
				addr, sink, _ := startProxyTLS(t, up.url, nil, srvCfg)
				conn, br := rawClientTLS(t, addr, chatBody, cliCfg)
				up.request(t) // the upstream has the request
				if tt.readFirst != "" {
					readUntil(t, br, tt.readFirst)
				}
				conn.Close()

				r := sink.next(t)
				if r.Reason != endreason.ClientCancel || r.Phase != tt.phase {
					t.Errorf("record %s/%s phase %s, want client_cancel phase %s", r.Reason, r.Detail, r.Phase, tt.phase)
				}
				if r.CancelToClose <= 0 {
					t.Errorf("cancel_to_close %v: the upstream was not cut for the cancel", r.CancelToClose)
				}
				if !<-closed {
					t.Error("the upstream's connection was not closed before the upstream ended its stream")
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
	second, closed := make(chan struct{}), make(chan bool, 1)
	var n atomic.Int32
	up := startUpstream(t, func(c *upConn) {
		if n.Add(1) == 1 {
			c.stream(2, 0)
			return
		}
		c.sse()
		c.role() // then silence: waiting on the upstream
		close(second)
		_, ok := c.waitGone(10 * time.Second)
		closed <- ok
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	conn, br := rawClient(t, addr, chatBody)
	readUntil(t, br, "0\r\n\r\n") // the first response's last chunk
	if r := sink.next(t); r.Reason != endreason.Stop {
		t.Fatalf("first request %s/%s", r.Reason, r.Detail)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	<-second
	conn.Close()
	if r := sink.next(t); r.Reason != endreason.ClientCancel || r.Phase != endreason.PhaseUpstream || r.CancelToClose <= 0 {
		t.Errorf("second request %s/%s phase %s cancel_to_close %v", r.Reason, r.Detail, r.Phase, r.CancelToClose)
	}
	if !<-closed {
		t.Error("the upstream never saw its connection closed")
	}
}

// TestCancelPhaseFromEngine has a client leave while the reference engine
// holds its request in each phase before the first token, and checks that
// the record names the phase the engine was in: preparing (before its
// headers), queued and prefill (from its progress comments). The client
// leaves once the engine has read the request and, where the phase comes
// from a progress comment, once it has read that comment (the proxy passes
// them on here), so the proxy has read it too.
func TestCancelPhaseFromEngine(t *testing.T) {
	srv, err := refengine.New(refengine.Config{AllowFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 1)
	go srv.Serve(requestSignal{ln, got})
	t.Cleanup(func() { srv.Close() })
	addr, sink, _ := startProxy(t, "http://"+ln.Addr().String(), func(c *Config) {
		c.Engine, c.AllowFaults, c.PassEngineTiming = "reference", true, true
	})
	tests := []struct {
		fault  string
		stream bool
		// comment is the engine's progress comment that puts the request
		// in the phase; "": the phase begins when the engine has it.
		comment string
		want    endreason.Phase
	}{
		{"slow_tokenizer=5s", true, "", endreason.PhasePreparing},
		{"queue_delay=5s", true, ": ttftlens-phase queued", endreason.PhaseQueued},
		// Not streamed: no progress comments, and no headers until the
		// end, so no headers does not mean preparing. Nor under
		// hold_headers, which holds a stream's until the first token.
		{"slow_tokenizer=5s", false, "", endreason.PhaseUpstream},
		{"hold_headers,queue_delay=5s", true, "", endreason.PhaseUpstream},
		// Last: its steps take 1.2 s, and the engine finishes a step before
		// it notices the client left.
		{"straggler=0:200ms", true, ": ttftlens-phase prefill", endreason.PhasePrefill},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s stream=%v", tt.fault, tt.stream), func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"ttftlens-ref","stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, tt.stream)
			conn := dialProxy(t, addr)
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Ttftlens-Fault: %s\r\nContent-Length: %d\r\n\r\n%s", tt.fault, len(body), body)
			<-got // the engine has the request
			if tt.comment != "" {
				readUntil(t, bufio.NewReader(conn), tt.comment)
			}
			conn.Close()
			r := sink.next(t)
			if r.Reason != endreason.ClientCancel || r.Phase != tt.want {
				t.Errorf("record %s/%s phase %s, want client_cancel in %s", r.Reason, r.Detail, r.Phase, tt.want)
			}
		})
	}
}

// requestSignal is a listener whose connections signal on got (without
// blocking) each time a read brings the start of a chat request.
type requestSignal struct {
	net.Listener
	got chan<- struct{}
}

func (l requestSignal) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return requestConn{c, l.got}, nil
}

type requestConn struct {
	net.Conn
	got chan<- struct{}
}

func (c requestConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if bytes.Contains(p[:n], []byte("POST /v1/chat/completions")) {
		select {
		case c.got <- struct{}{}:
		default:
		}
	}
	return n, err
}
