package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
)

// This file is what a client meets before the handler's gateway steps: the
// connection caps and the accept loop's backoff, the refusal of a request head that cannot be read, and
// the reading of the body, which waits for authentication and takes its
// memory from a budget shared by every request in flight.

// readBody reads the request body once the client is authenticated:
// within the body limit (413 over it, unread) and the body memory budget
// (503 over it, unread), which the body holds until a stream's first event
// or the exchange's release. When the body cannot be had it answers and
// finishes the request, and returns false.
func (x *exchange) readBody(ctx *fasthttp.RequestCtx, snap *gateway.Snapshot) bool {
	stream := ctx.RequestBodyStream()
	if stream == nil { // no body: neither Content-Length nor chunked
		return true
	}
	limit := min(x.p.cfg.MaxBodyBytes, snap.Config().MaxBodyBytes)
	size := ctx.Request.Header.ContentLength() // -1: chunked, up to limit
	if size > limit {
		x.rejectUnread(ctx, gateway.BodyTooLarge(limit))
		return false
	}
	hold := size
	if size < 0 {
		hold = limit
	}
	if !x.p.bodies.take(hold) {
		x.rejectUnread(ctx, rejBodyMemoryFull)
		return false
	}
	x.client.bodyHeld = hold
	body, err := readBodyStream(stream, size, limit)
	x.fin.rec.BytesIn = int64(len(body))
	if err != nil {
		x.failBodyRead(ctx, err, limit)
		return false
	}
	x.p.bodies.give(hold - len(body))
	x.client.bodyHeld = len(body)
	ctx.Request.SetBodyRaw(body)
	return true
}

var errBodyOverLimit = errors.New("request body over the limit")

// readBodyStream reads a body of size bytes, or of unknown size (-1) up
// to limit.
func readBodyStream(r io.Reader, size, limit int) ([]byte, error) {
	if size >= 0 {
		b := make([]byte, size)
		n, err := io.ReadFull(r, b)
		return b[:n], err
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(r, int64(limit)+1)); err != nil {
		return b.Bytes(), err
	}
	if b.Len() > limit {
		return b.Bytes()[:limit], errBodyOverLimit
	}
	return b.Bytes(), nil
}

// failBodyRead answers a body that could not be read: over the limit
// (chunked), not sent in time, cut off by the client (nobody to answer),
// or framed wrongly.
func (x *exchange) failBodyRead(ctx *fasthttp.RequestCtx, err error, limit int) {
	switch {
	case err == errBodyOverLimit:
		x.rejectUnread(ctx, gateway.BodyTooLarge(limit))
	case isTimeout(err):
		x.rejectGateway(ctx, rejBodyTimeout)
	case clientLeft(err):
		x.ctl.abort(x.gen, errClientGone)
		x.failAborted(ctx, errClientGone)
	default:
		x.rejectGateway(ctx, rejBodyFraming)
	}
}

// rejectUnread answers a request whose body is not read (all of it), and
// makes the answer the last on its connection. fasthttp reads and drops an
// unread body of up to lingerFromBytes itself; past that it would close the
// connection with the body unread, which resets it, and a client still
// sending its body then often reports the reset instead of the answer. So
// the proxy writes the answer itself, then lingers.
func (x *exchange) rejectUnread(ctx *fasthttp.RequestCtx, rej *gateway.Rejection) {
	x.rejectGateway(ctx, rej)
	n := ctx.Request.Header.ContentLength() // -1: chunked
	if ctx.RequestBodyStream() == nil || n >= 0 && n <= lingerFromBytes {
		return
	}
	conn := ctx.Conn()
	ctx.SetConnectionClose()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {
		answerAndLinger(ctx, conn)
		_ = conn.Close()
	})
}

// Lingering close, as nginx does it: a connection answered before its
// request was read is not closed at once, which would reset it, but after
// what the client still sends has been read and dropped, for at most
// lingerTime. Nothing read is kept.
const (
	lingerTime      = 5 * time.Second
	lingerFromBytes = 256 << 10 // fasthttp drops an unread body up to this size itself
)

// answerAndLinger writes ctx's response to conn, half-closes conn, then
// drops what the client still sends until it closes or lingerTime passes.
func answerAndLinger(ctx *fasthttp.RequestCtx, conn net.Conn) {
	w := bufio.NewWriter(conn)
	if ctx.Response.Write(w) != nil || w.Flush() != nil {
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, conn)
}

var (
	rejBodyMemoryFull = &gateway.Rejection{
		Status: fasthttp.StatusServiceUnavailable, RetryAfter: 1, Type: "server_error",
		Code:    string(endreason.DetailBodyMemoryFull),
		Message: "The proxy holds as many request bodies as it may; retry shortly.",
		Reason:  endreason.WorkerFailure, Detail: endreason.DetailBodyMemoryFull,
	}
	rejBodyTimeout = &gateway.Rejection{
		Status: fasthttp.StatusRequestTimeout, Type: "invalid_request_error",
		Code:    string(endreason.DetailBodyReadTimeout),
		Message: "The request body was not received within " + readTimeout.String() + ".",
		Reason:  endreason.ClientCancel, Detail: endreason.DetailBodyReadTimeout,
	}
	rejBodyFraming = &gateway.Rejection{
		Status: fasthttp.StatusBadRequest, Type: "invalid_request_error",
		Code:    string(endreason.DetailMalformedRequest),
		Message: "The request body's chunked framing is malformed.",
		Reason:  endreason.InvalidRequest, Detail: endreason.DetailMalformedRequest,
	}
)

// clientLeft reports a read error that means the client closed or reset
// the connection.
func clientLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET)
}

// bodyBudget is the memory request bodies may hold together, in bytes.
type bodyBudget struct {
	limit int64
	held  atomic.Int64
}

// take reserves n bytes, or reports that they would go over the limit.
func (b *bodyBudget) take(n int) bool {
	for {
		held := b.held.Load()
		if held+int64(n) > b.limit {
			return false
		}
		if b.held.CompareAndSwap(held, held+int64(n)) {
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *bodyBudget) give(n int) { b.held.Add(-int64(n)) }

// refuseRequest is fasthttp's ErrorHandler: it answers a request whose head
// (request line and headers, or the first bytes of its body) could not be
// read, so it has no record, with an OpenAI-style error, the status the
// refusal calls for and an X-Request-Id, and counts it. fasthttp then
// closes the connection.
func (p *Proxy) refuseRequest(ctx *fasthttp.RequestCtx, err error) {
	why, status, msg := refusal(err, p.cfg.MaxHeaderBytes)
	if c := p.cfg.Refusals; c != nil {
		c.RequestRefused(why)
	}
	id := newRequestID()
	rej := gateway.Rejection{Type: "invalid_request_error", Code: string(why), Message: msg}
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("X-Request-Id", id)
	ctx.SetConnectionClose()
	ctx.SetBody(rej.AppendJSON(nil))
	p.log.Debug().Str("request_id", id).Str("refusal", string(why)).Msg("request refused before its head was read")
	// A client whose head is too large may still be sending it: answer and
	// linger here (fasthttp's own write of the answer then fails on the
	// closed side, harmlessly). The other refusals come once the client
	// stopped sending. Only on a connection's first request: after one,
	// fasthttp may hold a pipelined answer that must go out first.
	if why == endreason.RefusedHeadersTooLarge && ctx.ConnRequestNum() == 0 {
		answerAndLinger(ctx, ctx.Conn())
	}
}

// refusal says why a request head could not be read, from fasthttp's error.
func refusal(err error, maxHeader int) (why endreason.Refusal, status int, msg string) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		return endreason.RefusedHeadersTooLarge, fasthttp.StatusRequestHeaderFieldsTooLarge,
			"The request line and headers are over the limit of " + strconv.Itoa(maxHeader) + " bytes."
	case isTimeout(err):
		return endreason.RefusedTimeout, fasthttp.StatusRequestTimeout,
			"The request was not received within " + readTimeout.String() + "."
	case clientLeft(err):
		return endreason.RefusedIncomplete, fasthttp.StatusBadRequest,
			"The connection ended in the middle of the request."
	}
	return endreason.RefusedMalformed, fasthttp.StatusBadRequest, "The request is not a well-formed HTTP/1.1 request."
}

// connLimits caps the client connections open at once, in total and per
// client IP address. A connection counts from its accept until fasthttp
// is done with it (connState).
type connLimits struct {
	max, perClient int // 0: no cap
	refusal        map[endreason.Refusal][]byte

	mu     sync.Mutex
	open   int
	byAddr map[netip.Addr]int
}

// newConnLimits returns the caps, nil when there are none.
func newConnLimits(maxConns, perClient int) *connLimits {
	if maxConns == 0 && perClient == 0 {
		return nil
	}
	return &connLimits{max: maxConns, perClient: perClient, byAddr: make(map[netip.Addr]int),
		refusal: map[endreason.Refusal][]byte{
			endreason.RefusedConnLimit: refusalResponse(fasthttp.StatusServiceUnavailable, "server_error", endreason.RefusedConnLimit,
				"The proxy holds its maximum of "+strconv.Itoa(maxConns)+" client connections; retry shortly."),
			endreason.RefusedPerClientLimit: refusalResponse(fasthttp.StatusTooManyRequests, "rate_limit_error", endreason.RefusedPerClientLimit,
				"Your address holds its maximum of "+strconv.Itoa(perClient)+" connections; reuse them, or retry shortly."),
		}}
}

// refusalResponse is the whole HTTP response that refuses a connection.
func refusalResponse(status int, typ string, why endreason.Refusal, msg string) []byte {
	rej := gateway.Rejection{Type: typ, Code: string(why), Message: msg}
	body := rej.AppendJSON(nil)
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + fasthttp.StatusMessage(status) +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + string(body))
}

// admit counts c in, or says which cap it is over.
func (l *connLimits) admit(c net.Conn) (endreason.Refusal, bool) {
	addr, ok := clientAddr(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.open >= l.max:
		return endreason.RefusedConnLimit, false
	case ok && l.perClient > 0 && l.byAddr[addr] >= l.perClient:
		return endreason.RefusedPerClientLimit, false
	}
	l.open++
	if ok {
		l.byAddr[addr]++
	}
	return "", true
}

// leave counts an admitted connection out.
func (l *connLimits) leave(c net.Conn) {
	addr, ok := clientAddr(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if !ok {
		return
	}
	if n := l.byAddr[addr] - 1; n > 0 {
		l.byAddr[addr] = n
	} else {
		delete(l.byAddr, addr)
	}
}

// clientAddr is the IP address a connection comes from (IPv4-mapped IPv6
// as IPv4); false for a connection without one.
func clientAddr(c net.Conn) (netip.Addr, bool) {
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return a.AddrPort().Addr().Unmap(), true
}

// cappedListener refuses the connections over the caps as it accepts
// them, so fasthttp never sees them.
type cappedListener struct {
	net.Listener
	limits   *connLimits
	refusals Refusals
}

func (ln *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		why, ok := ln.limits.admit(c)
		if ok {
			return c, nil
		}
		if ln.refusals != nil {
			ln.refusals.ConnectionRefused(why)
		}
		ln.limits.refuse(c, why)
	}
}

// retryingListener keeps accepting through the errors that pass: the
// process or the system out of file descriptors, the kernel out of memory
// for sockets. fasthttp's Serve returns on them, and the process would
// exit. It waits and accepts again, as net/http's Server does (5 ms,
// doubling to 1 s, from the first error of each Accept), and logs each
// error; the connections meanwhile wait in the listen backlog. Close ends
// a wait at once. Other errors (the listener closed) are returned.
type retryingListener struct {
	net.Listener
	clock  clock.Clock
	log    zerolog.Logger
	closed chan struct{}
	once   sync.Once
}

// The bounds of retryingListener's wait.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

func newRetryingListener(ln net.Listener, c clock.Clock, log zerolog.Logger) *retryingListener {
	return &retryingListener{Listener: ln, clock: c, log: log, closed: make(chan struct{})}
}

func (ln *retryingListener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		c, err := ln.Listener.Accept()
		if err == nil || !acceptPasses(err) {
			return c, err
		}
		wait = min(max(2*wait, minAcceptBackoff), maxAcceptBackoff)
		ln.log.Warn().Err(err).Dur("retry_in", wait).Msg("accepting a connection failed; retrying (raise the open-file limit or lower --max-conns)")
		clock.Sleep(context.Background(), ln.clock, wait, ln.closed)
	}
}

func (ln *retryingListener) Close() error {
	ln.once.Do(func() { close(ln.closed) })
	return ln.Listener.Close()
}

// acceptPasses reports an accept error that waiting can cure: a lack of
// file descriptors or socket memory, or a timeout.
func acceptPasses(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.As(err, &ne) && ne.Timeout()
}

// refuse answers a plain connection with the refusal and closes it. A TLS
// connection is only closed: answering would first need its handshake,
// which a client can stall.
func (l *connLimits) refuse(c net.Conn, why endreason.Refusal) {
	if _, isTLS := c.(*tls.Conn); !isTLS {
		// A fresh socket's send buffer takes the few hundred bytes at
		// once; the deadline only guards the accept loop.
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(l.refusal[why])
	}
	_ = c.Close()
}
