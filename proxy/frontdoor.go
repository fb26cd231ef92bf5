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
// connection caps and the accept loop's backoff, the refusal of a request
// head that cannot be read, the check of a head before any of its body is
// read, and the reading of the body, which takes its memory from a budget
// shared by every request in flight, within its key's share.

// readBody reads the request body once the client is authenticated (key
// is its name, "" without one): within the body limit (413 over it,
// unread) and the body memory budget and the key's share of it (503 over
// them, unread), which the body holds until a stream's first event or the
// exchange's release. When the body cannot be had it answers and finishes
// the request, and returns false.
func (x *exchange) readBody(ctx *fasthttp.RequestCtx, snap *gateway.Snapshot, key string) bool {
	stream := ctx.RequestBodyStream()
	if stream == nil { // no body: neither Content-Length nor chunked
		return true
	}
	limit := x.p.bodyLimit(snap)
	size := ctx.Request.Header.ContentLength() // -1: chunked, up to limit
	if size > limit {
		x.rejectUnread(ctx, gateway.BodyTooLarge(limit))
		return false
	}
	hold := size
	if size < 0 {
		hold = limit
	}
	switch x.p.bodies.take(key, hold) {
	case budgetFull:
		x.rejectUnread(ctx, rejBodyMemoryFull)
		return false
	case shareFull:
		x.rejectUnread(ctx, rejKeyBodyMemoryFull)
		return false
	}
	x.client.bodyHeld, x.client.bodyKey = hold, key
	body, err := readBodyStream(stream, size, limit)
	x.fin.rec.BytesIn = int64(len(body))
	if err != nil {
		x.failBodyRead(ctx, err, limit)
		return false
	}
	x.p.bodies.give(key, hold-len(body))
	x.client.bodyHeld = len(body)
	ctx.Request.SetBodyRaw(body)
	return true
}

// bodyLimit is the largest request body snap lets through.
func (p *Proxy) bodyLimit(snap *gateway.Snapshot) int {
	return min(p.cfg.MaxBodyBytes, snap.Config().MaxBodyBytes)
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
		x.rejectGateway(ctx, x.p.bodyLate)
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
	lingerClose(ctx)
}

// lingerClose makes ctx's answer the last on its connection: the proxy
// writes it itself, then lingers.
func lingerClose(ctx *fasthttp.RequestCtx) {
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
	rejKeyBodyMemoryFull = &gateway.Rejection{
		Status: fasthttp.StatusServiceUnavailable, RetryAfter: 1, Type: "server_error",
		Code:    string(endreason.DetailBodyMemoryFull),
		Message: "The request bodies in flight under this API key hold its share of the proxy's body memory; retry shortly.",
		Reason:  endreason.WorkerFailure, Detail: endreason.DetailBodyMemoryFull,
	}
	rejBodyFraming = &gateway.Rejection{
		Status: fasthttp.StatusBadRequest, Type: "invalid_request_error",
		Code:    string(endreason.DetailMalformedRequest),
		Message: "The request body's chunked framing is malformed.",
		Reason:  endreason.InvalidRequest, Detail: endreason.DetailMalformedRequest,
	}
)

// bodyTimeout is the answer to a body not sent within the read timeout d.
func bodyTimeout(d time.Duration) *gateway.Rejection {
	return &gateway.Rejection{
		Status: fasthttp.StatusRequestTimeout, Type: "invalid_request_error",
		Code:    string(endreason.DetailBodyReadTimeout),
		Message: "The request body was not received within " + d.String() + ".",
		Reason:  endreason.ClientCancel, Detail: endreason.DetailBodyReadTimeout,
	}
}

// clientLeft reports a read error that means the client closed or reset
// the connection.
func clientLeft(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET)
}

// bodyBudget is the memory request bodies may hold together, and the
// share of it the bodies under one API key may hold, in bytes.
type bodyBudget struct {
	limit  int64
	perKey int64 // 0: no share (requests without a key have none)

	mu    sync.Mutex
	held  int64
	byKey map[string]int64 // the keys holding any
}

// What take says.
const (
	budgetTaken = iota
	budgetFull  // over the limit
	shareFull   // over the key's share
)

// take reserves n bytes for a body under key ("": none), or says which
// bound they would pass.
func (b *bodyBudget) take(key string, n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.held+int64(n) > b.limit:
		return budgetFull
	case key != "" && b.perKey > 0 && b.byKey[key]+int64(n) > b.perKey:
		return shareFull
	}
	b.held += int64(n)
	if key != "" && n > 0 {
		if b.byKey == nil {
			b.byKey = map[string]int64{}
		}
		b.byKey[key] += int64(n)
	}
	return budgetTaken
}

// give returns n bytes taken before under key.
func (b *bodyBudget) give(key string, n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= int64(n)
	if key == "" {
		return
	}
	if left := b.byKey[key] - int64(n); left > 0 {
		b.byKey[key] = left
	} else {
		delete(b.byKey, key)
	}
}

// inUse is the bytes held.
func (b *bodyBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// The head check is fasthttp's HeaderReceived: it runs once a request's
// line and headers are read, before fasthttp reads any of its body, which
// it does before the handler runs (a Content-Length body's first 8 KiB, or
// all of a smaller one). So the head alone decides 401 and 413, and a
// 100 Continue goes out only once both passed. A refused head's body is
// made to look empty to fasthttp, which then reads none of it and sends no
// 100 Continue; the handler answers, and the connection ends after the
// answer (the body left unread, lingerClose).
//
// What the check decided reaches the handler, or the ErrorHandler when
// fasthttp fails to read the body's first bytes (it then resets the
// request, head and all), through a note keyed by the request's header,
// which belongs to one fasthttp RequestCtx.

// headNote is what the head check leaves for the rest of the request.
type headNote struct {
	seq  atomic.Uint64          // Proxy.headSeq when written: see takeHead (atomic: sweepHeads reads it)
	rej  *gateway.Rejection     // the head was refused: 401 or 413
	head fasthttp.RequestHeader // an accepted head, kept while fasthttp reads the body's first bytes
}

var headNotes = sync.Pool{New: func() any { return new(headNote) }}

func putHead(n *headNote) {
	if n != nil {
		n.rej = nil
		headNotes.Put(n)
	}
}

// refused is the head check's refusal, nil when it let the head through
// or left no note.
func (n *headNote) refused() *gateway.Rejection {
	if n == nil {
		return nil
	}
	return n.rej
}

// checkHead is the head check. It leaves a note only for a head with a
// body fasthttp would read from before the handler (a Content-Length one),
// or one it refuses.
func (p *Proxy) checkHead(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	n := h.ContentLength() // -1: chunked; -2: neither, no body
	if n == 0 || n < -1 || isHealthPath(h.RequestURI()) {
		return fasthttp.RequestConfig{} // no body: the handler decides as the request is read
	}
	snap := p.gw.Snapshot()
	_, rej := snap.Authenticate(h.Peek(fasthttp.HeaderAuthorization))
	if limit := p.bodyLimit(snap); rej == nil && n > limit {
		rej = gateway.BodyTooLarge(limit)
	}
	if rej == nil && n < 0 {
		return fasthttp.RequestConfig{} // chunked: fasthttp reads none of it before the handler
	}
	note := headNotes.Get().(*headNote)
	note.seq.Store(p.headSeq.Add(1))
	note.rej = rej
	if rej != nil {
		h.Del(fasthttp.HeaderExpect) // the answer is final: no 100 Continue
		h.SetContentLength(0)        // fasthttp reads none of the body
	} else {
		h.CopyTo(&note.head)
	}
	p.heads.Store(h, note)
	return fasthttp.RequestConfig{}
}

// isHealthPath reports a request URI for /health, which needs no key.
func isHealthPath(uri []byte) bool {
	const health = "/health"
	return bytes.HasPrefix(uri, []byte(health)) && (len(uri) == len(health) || uri[len(health)] == '?')
}

// takeHead returns the note the head check left for ctx's request, nil
// when it left none. A note fasthttp never handed on (the connection
// closed under the body's read, or under a 100 Continue) stays with the
// RequestCtx, which fasthttp then gives to another connection: a note
// written before the connection's current request began is that one, and
// is dropped.
func (p *Proxy) takeHead(ctx *fasthttp.RequestCtx) *headNote {
	v, ok := p.heads.LoadAndDelete(&ctx.Request.Header)
	if !ok {
		return nil
	}
	n := v.(*headNote)
	if began := p.requestBegan(ctx.Conn()); began == 0 || n.seq.Load() < began {
		return nil // not back into the pool: sweepHeads may be looking at it
	}
	return n
}

// sweepHeads drops the notes fasthttp never handed on and no later
// request on their RequestCtx replaced (takeHead): a note is handed on
// within the read timeout of its request's first byte, so one written
// before the sweep before last is left behind. It runs until the proxy
// stops.
func (p *Proxy) sweepHeads() {
	tick := time.NewTicker(p.cfg.ReadTimeout)
	defer tick.Stop()
	var last, before uint64 // headSeq at the last sweep and at the one before
	for {
		select {
		case <-p.stopCtx.Done():
			return
		case <-tick.C:
		}
		p.dropHeadsBefore(before)
		last, before = p.headSeq.Load(), last
	}
}

// dropHeadsBefore drops the notes written before headSeq was mark. None
// of them goes back into the pool (takeHead drops them too), so the note
// a key holds is never one in use again under a later seq.
func (p *Proxy) dropHeadsBefore(mark uint64) {
	p.heads.Range(func(k, v any) bool {
		if v.(*headNote).seq.Load() < mark {
			p.heads.CompareAndDelete(k, v)
		}
		return true
	})
}

// refuseRequest is fasthttp's ErrorHandler. A request whose head was read
// and accepted, and whose body's first bytes fasthttp could not read, is
// recorded and answered (bodyNotRead). Otherwise the request's head could
// not be read, so it has no record: it is answered with an OpenAI-style
// error, the status the refusal calls for and an X-Request-Id, and
// counted; fasthttp then closes the connection. A connection that sent
// nothing within the read timeout (an idle preconnect) is counted apart
// and closed unanswered.
func (p *Proxy) refuseRequest(ctx *fasthttp.RequestCtx, err error) {
	if note := p.takeHead(ctx); note != nil {
		defer putHead(note)
		if note.rej == nil && (isTimeout(err) || clientLeft(err)) {
			p.bodyNotRead(ctx, &note.head, err)
			return
		}
	}
	why, status, msg := refusal(err, &p.cfg)
	if why == endreason.RefusedTimeout && p.requestBegan(ctx.Conn()) == 0 {
		why = endreason.RefusedIdlePreconnect
	}
	if c := p.cfg.Refusals; c != nil {
		c.RequestRefused(why)
	}
	if why == endreason.RefusedIdlePreconnect {
		// Nothing to answer: closed, as nginx closes it (fasthttp's write
		// of an answer then fails on the closed connection, harmlessly).
		_ = ctx.Conn().Close()
		return
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

// bodyNotRead records and answers a request whose head (a copy of it:
// fasthttp reset the request) was accepted and whose body's first bytes
// did not come in time, or never will (the client left). The record names
// the key.
func (p *Proxy) bodyNotRead(ctx *fasthttp.RequestCtx, head *fasthttp.RequestHeader, err error) {
	head.CopyTo(&ctx.Request.Header)
	x := p.acquire()
	defer p.release(x)
	x.begin(ctx)
	if key, _ := p.gw.Snapshot().Authenticate(head.Peek(fasthttp.HeaderAuthorization)); key != nil {
		x.fin.rec.Key = key.Name
	}
	x.failBodyRead(ctx, err, 0)
}

// refusal says why a request head could not be read, from fasthttp's error.
func refusal(err error, cfg *Config) (why endreason.Refusal, status int, msg string) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		return endreason.RefusedHeadersTooLarge, fasthttp.StatusRequestHeaderFieldsTooLarge,
			"The request line and headers are over the limit of " + strconv.Itoa(cfg.MaxHeaderBytes) + " bytes."
	case isTimeout(err):
		return endreason.RefusedTimeout, fasthttp.StatusRequestTimeout,
			"The request was not received within " + cfg.ReadTimeout.String() + "."
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

// Close closes the listener once; later calls do nothing and return nil.
func (ln *retryingListener) Close() error {
	var err error
	ln.once.Do(func() {
		close(ln.closed)
		err = ln.Listener.Close()
	})
	return err
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
