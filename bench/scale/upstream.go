package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// The upstream mode is a zero-compute SSE server: a chat completion is
// answered at once with its tokens as OpenAI chunks, the first with the
// headers, the next ones interval apart. The client says how many and how
// far apart in request headers (forwarded by both proxies). Each event
// carries "ts", the upstream's clock (ns since it started) just before the
// write that sends it: the client compares its arrival gaps with these send
// gaps. Any other request gets a small JSON answer (a model list).
const (
	headerTokens   = "X-Scale-Tokens"
	headerInterval = "X-Scale-Interval-Us"
)

func runUpstream(listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String()) // the orchestrator waits for this line
	start := time.Now()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		go serveUpstreamConn(c, start)
	}
}

// upstreamRequest is what the upstream reads of a request head.
type upstreamRequest struct {
	stream        bool
	tokens        int
	interval      time.Duration
	contentLength int
	close         bool
}

func serveUpstreamConn(c net.Conn, start time.Time) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	var out []byte
	for {
		req, err := readUpstreamRequest(br)
		if err != nil {
			return
		}
		if _, err := br.Discard(req.contentLength); err != nil {
			return
		}
		if !req.stream {
			body := `{"object":"list","data":[{"id":"m","object":"model","owned_by":"scale"}]}`
			out = fmt.Appendf(out[:0], "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if _, err := c.Write(out); err != nil {
				return
			}
		} else if out, err = streamTokens(c, out, req, start); err != nil {
			return
		}
		if req.close {
			return
		}
	}
}

// streamTokens writes the event stream of one request: chunked, one chunk
// per event, the last content event with the finish reason, then [DONE]
// and the body's end in the same write.
func streamTokens(c net.Conn, out []byte, req upstreamRequest, start time.Time) ([]byte, error) {
	out = append(out[:0], "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"...)
	first := time.Now()
	for i := range req.tokens {
		if i > 0 && req.interval > 0 {
			time.Sleep(time.Until(first.Add(time.Duration(i) * req.interval)))
		}
		last := i == req.tokens-1
		out = appendChunk(out, tokenEvent, last, int64(time.Since(start)))
		if last {
			out = appendChunk(out, doneEvent, false, 0)
			out = append(out, "0\r\n\r\n"...)
		}
		if _, err := c.Write(out); err != nil {
			return out, err
		}
		out = out[:0]
	}
	return out, nil
}

var (
	tokenEvent = []byte(`data: {"id":"chatcmpl-scale","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":`)
	doneEvent  = []byte("data: [DONE]\n\n")
)

// appendChunk appends one event as one chunk: a token event (with its
// finish reason when last, and ts) or the [DONE] event.
func appendChunk(out, ev []byte, last bool, ts int64) []byte {
	var body [256]byte
	b := append(body[:0], ev...)
	if bytes.Equal(ev, tokenEvent) {
		if last {
			b = append(b, `"stop"`...)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `}],"ts":`...)
		b = strconv.AppendInt(b, ts, 10)
		b = append(b, "}\n\n"...)
	}
	out = strconv.AppendInt(out, int64(len(b)), 16)
	out = append(out, "\r\n"...)
	out = append(out, b...)
	return append(out, "\r\n"...)
}

func readUpstreamRequest(br *bufio.Reader) (upstreamRequest, error) {
	var req upstreamRequest
	line, err := br.ReadSlice('\n')
	if err != nil {
		return req, err
	}
	req.stream = bytes.HasPrefix(line, []byte("POST ")) && bytes.Contains(line, []byte("/chat/completions"))
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return req, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		n, _ := strconv.Atoi(string(value))
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			req.contentLength = n
		case bytes.EqualFold(name, []byte(headerTokens)):
			req.tokens = n
		case bytes.EqualFold(name, []byte(headerInterval)):
			req.interval = time.Duration(n) * time.Microsecond
		case bytes.EqualFold(name, []byte("Connection")):
			req.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	if req.stream && req.tokens < 1 {
		req.tokens = 1
	}
	return req, nil
}

// upstreamMain is the upstream mode's entry point.
func upstreamMain(listen string) {
	if err := runUpstream(listen); err != io.EOF { // it serves until its listener fails
		fmt.Fprintln(os.Stderr, "upstream:", err)
		os.Exit(1)
	}
}
