package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/record"
)

// BenchmarkCancelToUpstreamClose is how long after a client leaves the
// upstream sees its connection closed (TestClientCancel checks that it
// does, and why): each request streams its first event to the client and
// falls silent; the client reads that event and closes; the upstream,
// blocked in a read, takes the time that read ends. One request at a time,
// plain TCP, loopback. Reported: close-p50-us and close-p99-us.
func BenchmarkCancelToUpstreamClose(b *testing.B) {
	closed := make(chan time.Time, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go silentAfterFirstEvent(conn, closed)
		}
	}()
	ended := make(chan struct{}, 1)
	base, _ := benchProxy(b, "http://"+ln.Addr().String(), recordSignal(ended), 1)
	addr := strings.TrimPrefix(base, "http://")
	var took []time.Duration
	for b.Loop() {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
		readUntil(b, bufio.NewReader(conn), `"assistant"`)
		left := time.Now()
		conn.Close()
		took = append(took, (<-closed).Sub(left))
		<-ended
	}
	slices.Sort(took)
	b.ReportMetric(quantileUS(took, 0.50), "close-p50-us")
	b.ReportMetric(quantileUS(took, 0.99), "close-p99-us")
}

// silentAfterFirstEvent answers one request with SSE headers and a role
// event, then reads until the connection ends and sends when on closed.
func silentAfterFirstEvent(conn net.Conn, closed chan<- time.Time) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	ev := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
	_, _ = br.ReadByte() // returns when the proxy closes the connection
	closed <- time.Now()
}

// recordSignal is a sink that signals each record on its channel.
type recordSignal chan<- struct{}

func (s recordSignal) Emit(*record.Record) { s <- struct{}{} }
