//go:build integration

package deploytest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/internal/testbin"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
)

// afterLeaving is how many tokens the engine generates after its client
// left, in this test (the ignore_disconnect fault).
const afterLeaving = 40

// TestTokensAfterCancelAlert makes the waste of a cancel real and follows
// it to the alert: an engine that goes on for afterLeaving tokens after
// the proxy closed its connection, two clients that leave mid-stream (one
// closes its connection, one stops reading until the proxy gives up on it),
// and a real Prometheus scraping the proxy with the shipped recording and
// alert rules (its copy evaluates them every second, and fires an alert as
// soon as its expression holds). The records count what the proxy held,
// the proxy's metrics carry what the engine generated after the close, and
// TTFTLensTokensAfterCancel fires, for both, where it did not before.
func TestTokensAfterCancelAlert(t *testing.T) {
	promBin := testbin.Path(t, "prometheus")
	st := startWasteStack(t)
	prom := startPrometheus(t, promBin, []string{st.admin}, st.engineAddr, alertsWithoutFor)

	// A stream read to its end, once Prometheus scrapes the proxy (it sees
	// the tokens delivered grow), starts the proxy's scrape of the engine.
	// Before any cancel, Prometheus must hold both counts at zero (so it
	// sees them grow) and the ratio the alert watches at zero.
	prom.eventually(t, "the proxy scraped", `up{job="ttftlens"} == 1`)
	st.read(t, "warm-up", "", 0)
	if r := st.records.next(t); r.Reason != endreason.Length {
		t.Fatalf("warm-up record %s/%s, want length (its max_tokens)", r.Reason, r.Detail)
	}
	prom.eventually(t, "both counts of tokens after cancel scraped at zero, and the alert's ratio at zero",
		`ttftlens_tokens_after_cancel_total{job="ttftlens"} == 0
		 and on() ttftlens_upstream_tokens_after_cancel_total{job="ttftlens", upstream="engine-a"} == 0
		 and on() job:ttftlens_tokens_after_cancel:ratio_rate15m{job="ttftlens"} == 0`)
	if s, err := prom.query(`ALERTS{alertname="TTFTLensTokensAfterCancel"}`, time.Now()); err != nil || len(s) != 0 {
		t.Fatalf("TTFTLensTokensAfterCancel before any cancel: %v %v", s, err)
	}

	// A client that reads three content chunks and leaves, and one that
	// stops reading: the proxy gives up on it at the write stall limit.
	fault := fmt.Sprintf("ignore_disconnect=%d", afterLeaving)
	st.read(t, "leaves", fault, 3)
	st.stopReading(t, "stops-reading", fault)
	want := map[string]endreason.Detail{"leaves": endreason.DetailClientClosed, "stops-reading": endreason.DetailClientWriteStall}
	held := 0
	for range want {
		r := st.records.next(t)
		if r.Reason != endreason.ClientCancel || r.Detail != want[r.RequestID] {
			t.Fatalf("record %s: %s/%s, want client_cancel/%s", r.RequestID, r.Reason, r.Detail, want[r.RequestID])
		}
		if r.Detail == endreason.DetailClientWriteStall && r.TokensAfterCancel < 1 {
			t.Errorf("record %s: tokens_after_cancel %d: the proxy was blocked on its client with an event in hand", r.RequestID, r.TokensAfterCancel)
		}
		held += r.TokensAfterCancel
		t.Logf("record %s: %s/%s, %d tokens out, %d after cancel", r.RequestID, r.Reason, r.Detail, r.TokensOut, r.TokensAfterCancel)
	}

	// The engine generated afterLeaving tokens for each after the proxy
	// closed the connection, then aborted it.
	for _, id := range []string{"leaves", "stops-reading"} {
		var tr refengine.Truth
		eventually(t, "the engine's truth of "+id, func() bool { var ok bool; tr, ok = st.engine.Truth(id); return ok })
		if tr.FinishReason != "abort" || !tr.ClientGone || tr.TokensAfterClientLeft != afterLeaving {
			t.Errorf("engine truth of %s: finish %q, client gone %v, %d tokens after it left; want abort, true, %d",
				id, tr.FinishReason, tr.ClientGone, tr.TokensAfterClientLeft, afterLeaving)
		}
	}

	// Both counts reach Prometheus through the proxy's /metrics: what the
	// records say the proxy held, and what the engine counts.
	prom.eventually(t, "the proxy's and the engine's counts of tokens after cancel",
		fmt.Sprintf(`ttftlens_tokens_after_cancel_total{job="ttftlens"} == %d
		 and on() ttftlens_upstream_tokens_after_cancel_total{job="ttftlens", upstream="engine-a"} == %d
		 and on() ttftlens_upstream_aborted_requests_total{job="ttftlens", upstream="engine-a"} == 2`, held, 2*afterLeaving))

	// The alert fires, and for this cause: tokens after cancel from both
	// sources.
	prom.eventually(t, "TTFTLensTokensAfterCancel firing with tokens after cancel from the proxy and the engine",
		`ALERTS{alertname="TTFTLensTokensAfterCancel", alertstate="firing", job="ttftlens", severity="ticket"}
		 and on(job) job_source:ttftlens_tokens_after_cancel:rate15m{source="proxy"} > 0
		 and on(job) job_source:ttftlens_tokens_after_cancel:rate15m{source="engine"} > 0`)
}

// alertsWithoutFor makes every alert of the test's copy of alerts.yml fire
// as soon as its expression holds.
func alertsWithoutFor(rules []byte) []byte {
	return regexp.MustCompile(`(?m)^(\s+for:)\s*\S+$`).ReplaceAll(rules, []byte("$1 0s"))
}

// eventually evaluates expr until it returns a sample, within a generous
// deadline for a useful failure (not a timing bound).
func (p *prometheus) eventually(t *testing.T, what, expr string) {
	t.Helper()
	eventually(t, what, func() bool {
		s, err := p.query(expr, time.Now())
		return err == nil && len(s) > 0
	})
}

// eventually polls cond until it holds, failing the test after a
// deadline far beyond what it needs.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 2 minutes", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wasteStack is the reference engine and the proxy in front of it, wired as
// cmd/ttftlens/serve.go wires them with --scrape-engine-metrics, with
// small socket send buffers towards the clients, so a client that stops
// reading blocks the proxy within a few events.
type wasteStack struct {
	engine                 *refengine.Server
	engineAddr, url, admin string // host:port
	records                *recordQueue
}

func startWasteStack(t *testing.T) *wasteStack {
	t.Helper()
	eng, err := refengine.New(refengine.Config{ModelName: modelName, AllowFaults: true})
	if err != nil {
		t.Fatal(err)
	}
	var lns [3]net.Listener
	for i := range lns {
		if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	st := &wasteStack{engine: eng, engineAddr: lns[0].Addr().String(), url: lns[1].Addr().String(),
		admin: lns[2].Addr().String(), records: &recordQueue{c: make(chan record.Record, 8)}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = eng.Serve(lns[0]) }()

	reg := exporters.NewRegistry()
	metrics := exporters.NewMetrics(reg, exporters.MetricOptions{Models: []string{modelName}, Upstreams: []string{upstreamName}})
	p, err := proxy.New(proxy.Config{
		Upstream: "http://" + st.engineAddr, UpstreamName: upstreamName, AllowFaults: true,
		ScrapeEngineMetrics: 100 * time.Millisecond, EngineWaste: metrics, Tracker: metrics,
		ClientWriteStall: 200 * time.Millisecond,
	}, record.Sinks{metrics, st.records}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	admin := &fasthttp.Server{Handler: exporters.AdminHandler(reg, nil)}
	wg.Add(2)
	go func() { defer wg.Done(); _ = p.Serve(smallSendBuffers{lns[1]}) }()
	go func() { defer wg.Done(); _ = admin.Serve(lns[2]) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		_ = admin.ShutdownWithContext(ctx)
		eng.Close()
		wg.Wait()
	})
	return st
}

// smallSendBuffers gives each accepted connection a small, fixed socket
// send buffer (the kernel's autotuning would grow it past a whole
// generation).
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// send opens a connection to the proxy (with a small receive buffer when
// small) and sends a streamed chat request of maxTokens tokens with id and
// fault (none when empty).
func (st *wasteStack) send(t *testing.T, id, fault string, maxTokens int, small bool) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", st.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if small {
		_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	}
	if fault != "" {
		fault = "X-Ttftlens-Fault: " + fault + "\r\n"
	}
	body := chat(maxTokens, `"ignore_eos":true,`)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n%sContent-Length: %d\r\n\r\n%s",
		id, fault, len(body), body)
	return conn
}

// read streams a request and reads leaveAfter content chunks, then
// closes its connection; 0 reads the whole (short) stream, to the end of
// its chunked body, and leaves the connection open.
func (st *wasteStack) read(t *testing.T, id, fault string, leaveAfter int) {
	t.Helper()
	maxTokens := 8
	if leaveAfter > 0 {
		maxTokens = 1500
	}
	conn := st.send(t, id, fault, maxTokens, false)
	br := bufio.NewReader(conn)
	chunks := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v after %d content chunks", id, err, chunks)
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role"`) {
			if chunks++; leaveAfter > 0 && chunks == leaveAfter {
				conn.Close()
				return
			}
		}
		if line == "0\r\n" { // the last chunk: the response is over
			return
		}
	}
}

// stopReading streams a long request on a connection with a small receive
// buffer and never reads it: the proxy blocks on it and, at the write
// stall limit, gives up on it.
func (st *wasteStack) stopReading(t *testing.T, id, fault string) {
	t.Helper()
	st.send(t, id, fault, 2000, true)
}

// recordQueue hands the proxy's records to the test in order.
type recordQueue struct{ c chan record.Record }

func (q *recordQueue) Emit(r *record.Record) { q.c <- *r }

func (q *recordQueue) next(t *testing.T) record.Record {
	t.Helper()
	select {
	case r := <-q.c:
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("no record after 2 minutes")
		return record.Record{}
	}
}
