package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// upstream is one model server the proxy forwards to, with its own pool of
// keep-alive connections. (The gateway's Upstream is the same server as the
// gateway sees it: health, admission and routing.)
type upstream struct {
	// Name identifies the upstream in records and metrics.
	Name string
	// Addr is host:port.
	Addr   string
	hc     *fasthttp.HostClient
	kind   engineKind // the engine behind it, for its signal reader
	load   engineLoad // the scraping of its engine's /metrics
	flight flight     // its requests in flight, for the slot waits its engine does not report
	// discards counts the pooled connections closed because something
	// arrived that no request asked for; nil: not counted. Set before the
	// first dial.
	discards ConnDiscards
}

// discard counts a connection the pool closed, for why.
func (u *upstream) discard(why endreason.ConnDiscard) {
	if u.discards != nil {
		u.discards.UpstreamConnDiscarded(why)
	}
}

// An upstream response's status line and headers are parsed whole in a
// pooled read buffer, so the buffer's size is their limit; an exchange
// holds it while it reads them, and gives it back once the body has taken
// what it read past them. The body is read straight into its reader's
// buffer (the SSE scanner's), its framing taken off in place.
const (
	defaultUpstreamHeaderBytes = 16 << 10
	minUpstreamHeaderBytes     = 1 << 10
)

// UpstreamName checks an upstream base URL as the proxy reads it and
// returns the upstream's label in records and metrics: name, or its
// host:port when name is empty.
func UpstreamName(rawURL, name string) (string, error) {
	up, err := newUpstream(rawURL, name, defaultUpstreamHeaderBytes, nil)
	if err != nil {
		return "", err
	}
	return up.Name, nil
}

// newUpstream parses an http:// or https:// base URL. name labels the
// upstream in records and metrics; empty means its host:port. maxHeaderBytes
// bounds a response's status line and headers. The connections it dials
// are registered with w, when not nil, which wakes their pumps at their end
// and, while they are idle in the pool, reports anything that arrives.
func newUpstream(rawURL, name string, maxHeaderBytes int, w *sock.Watcher) (*upstream, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream %q: scheme must be http or https", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("upstream %q: no host", rawURL)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("upstream %q: a path prefix is not supported; give the server's base URL", rawURL)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("upstream %q: port %s out of range (1 to 65535)", rawURL, p)
		}
	}
	addr := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	if name == "" {
		name = u.Host
	}
	dialer, err := newUpstreamDialer(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", rawURL, err)
	}
	var up *upstream // the dialed connections' idle reports count on it
	up = &upstream{
		Name: name,
		Addr: addr,
		hc: &fasthttp.HostClient{
			Addr:  addr,
			IsTLS: u.Scheme == "https",
			Dial: func(addr string) (net.Conn, error) {
				c, err := dialer.dial()
				if err != nil {
					return nil, err
				}
				cc := &countingConn{Conn: c, raw: sock.New(c)}
				if cc.raw != nil {
					cc.raw.StampReceives() // without: arrivals are the reads'
					// A TLS body is never pumped: only plain sockets are watched.
					if w != nil && u.Scheme != "https" {
						cc.watcher, cc.watch = w, w.WatchEnd(cc.raw)
						cc.idle = func(bytes bool) { up.idleReport(cc.raw, bytes) }
					}
				}
				return cc, nil
			},
			// Each in-flight stream pins one connection for its whole life.
			MaxConns:           8192,
			MaxConnWaitTimeout: 2 * time.Second,
			// Below uvicorn's 5 s keep-alive, so we rarely reuse a
			// connection the engine is about to close.
			MaxIdleConnDuration: 4 * time.Second,
			// ReadTimeout stays 0: it would cap the whole stream. The
			// proxy's watchdog bounds time to first token and idle gaps.
			WriteTimeout:                  10 * time.Second,
			ReadBufferSize:                maxHeaderBytes,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
		},
	}
	return up, nil
}

// idleReport is the watcher's report that bytes (or, without, the peer's
// end) arrived on a connection idle in the pool: it is counted and shut
// down at once, and closed when the pool hands it out (its EndIdle fails).
func (u *upstream) idleReport(raw *sock.Conn, bytes bool) {
	if bytes {
		u.discard(endreason.DiscardIdleReadable)
	} else {
		u.discard(endreason.DiscardIdleClosed)
	}
	raw.Shutdown()
}

// errAbortedBeforeSend means the request was aborted before it reached the
// upstream connection.
var errAbortedBeforeSend = errors.New("aborted before the request was sent")

// exchangeError says how far an upstream exchange got before it failed.
type exchangeError struct {
	connect bool          // no connection could be made
	sent    bool          // the request was written
	waited  time.Duration // from the send to the failure, when sent
	err     error
}

// Error says how the exchange failed from the error's kind, never its
// text past the connect: fasthttp's header parse errors quote the bytes
// read, which may hold the upstream's cookies or keys.
func (e *exchangeError) Error() string {
	var op *net.OpError
	switch {
	case e.connect, !e.sent:
		return e.err.Error() // dialing, or writing our own request
	case headersTooLarge(e.err):
		return "response headers over the limit"
	case isClosedBeforeResponse(e.err):
		return "the connection closed before any response byte"
	case errors.As(e.err, &op):
		return "reading the response failed: " + op.Error()
	case malformedHeaders(e):
		return "the response headers could not be parsed"
	}
	return "the response headers could not be read"
}

func (e *exchangeError) Unwrap() error { return e.err }

// roundTrip sends req on a pooled connection and reads the response headers;
// the body is left to stream from body. It marks UpstreamConnected on tl
// when it has a connection and UpstreamSent when the request is written
// (fl, unless nil, joins u's flight as it is written: it may take one of
// the engine's slots),
// times the connection's reads on tl, and returns the connection it used
// (none when it could not connect). A reused keep-alive connection that
// fails before any response byte, right after the send (isStale), was
// closed by the engine while idle (its keep-alive timeout, a restart): the
// engine never saw the request, so it is sent once more, on a connection
// dialed for it.
//
// This is fasthttp's own transport reduced to the streaming case, plus
// attach/detach so the exchange can be aborted while waiting for headers,
// which fasthttp's default transport cannot do: its Do returns only
// once the headers are read, and offers no way to close the connection
// meanwhile.
func (u *upstream) roundTrip(req *fasthttp.Request, resp *fasthttp.Response, ab *control, tl *stages.Timeline, body *upstreamBody, fl *flightTicket) (record.UpstreamConn, error) {
	conn, err := u.tryRoundTrip(req, resp, ab, tl, body, fl, false)
	if err != nil && conn == record.ConnReused && isStale(err) && ab.aborted() == nil {
		if fl != nil {
			fl.cancel() // the engine never saw it
		}
		conn, err = u.tryRoundTrip(req, resp, ab, tl, body, fl, true)
	}
	return conn, err
}

// tryRoundTrip is one attempt of roundTrip, on a pooled connection or, with
// fresh, on a newly dialed one.
func (u *upstream) tryRoundTrip(req *fasthttp.Request, resp *fasthttp.Response, ab *control, tl *stages.Timeline, body *upstreamBody, fl *flightTicket, fresh bool) (used record.UpstreamConn, err error) {
	hc := u.hc
	cc, err := hc.AcquireConn(0, false)
	// The pool hands out its idle connections before it dials. With fresh,
	// those are closed on the way, as likely stale as the one that failed;
	// else so is one on which something arrived while it was idle.
	for err == nil && !cc.LastUseTime().IsZero() && (fresh || !u.reusable(cc.Conn())) {
		hc.CloseConn(cc)
		cc, err = hc.AcquireConn(0, false)
	}
	if err != nil {
		return record.ConnNone, &exchangeError{connect: true, err: err}
	}
	tl.MarkAt(stages.UpstreamConnected, tl.Now()) // a retry's connection replaces the stale one
	conn := cc.Conn()
	counted := countedConn(conn)
	if counted != nil {
		counted.clock(tl)
	}
	used = record.ConnNew
	if !cc.LastUseTime().IsZero() {
		used = record.ConnReused
	}
	if !ab.attach(conn) {
		hc.CloseConn(cc)
		return used, &exchangeError{err: errAbortedBeforeSend}
	}
	fail := func(sent bool, err error) (record.UpstreamConn, error) {
		ab.detach()
		hc.CloseConn(cc)
		return used, &exchangeError{sent: sent, err: err}
	}
	if hc.WriteTimeout > 0 {
		if err := conn.SetWriteDeadline(time.Now().Add(hc.WriteTimeout)); err != nil {
			return fail(false, err)
		}
	}
	if fl != nil {
		u.flight.begin(fl) // before the write: the engine may take it at once
	}
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		if fl != nil {
			fl.cancel()
		}
		return fail(false, err)
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		return fail(true, err)
	}
	sentAt := tl.Now()
	tl.MarkAt(stages.UpstreamSent, sentAt) // a retry's send replaces the stale one
	if counted != nil {
		counted.sentAt = sentAt
	}

	resp.StreamBody = true
	resp.SkipBody = true // the headers only: upstreamBody reads the body
	resp.Header.DisableNormalizing()
	br := hc.AcquireReader(conn)
	err = resp.ReadLimitBody(br, 0)
	resp.SkipBody = false
	if err != nil {
		hc.ReleaseReader(br)
		used, err := fail(true, err)
		err.(*exchangeError).waited = tl.Now() - sentAt
		return used, err
	}
	// fasthttp's pooled-connection type is unexported: keep it in a closure.
	release := func(reuse bool, why endreason.ConnDiscard) {
		if why != "" {
			u.discard(why)
		}
		if reuse {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}
	body.start(hc, release, conn, br, resp, ab)
	return used, nil
}

// reusable reports that conn, taken idle from the pool, may carry a
// request: nothing arrived on it while it was idle, and nothing waits in
// it now, right before the request is written (what arrives in between is
// the request's response as far as anyone can tell). A connection that is
// not is counted; the caller closes it.
func (u *upstream) reusable(conn net.Conn) bool {
	c := countedConn(conn)
	if c == nil {
		return true
	}
	why, ok := c.unpark()
	if !ok && why != "" {
		u.discard(why)
	}
	return ok
}

// isClosedBeforeResponse reports an upstream that closed the connection
// before sending any response byte.
func isClosedBeforeResponse(err error) bool {
	var nothing *fasthttp.ErrNothingRead
	return errors.As(err, &nothing) || errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed)
}

// malformedHeaders reports response headers that arrived but did not
// parse: the request was sent, and the read failed neither on the
// connection (closed, reset, timed out) nor on our size limit.
func malformedHeaders(err error) bool {
	var xe *exchangeError
	var ne net.Error
	return errors.As(err, &xe) && xe.sent && !xe.connect &&
		!isClosedBeforeResponse(xe.err) && !headersTooLarge(xe.err) && !errors.As(xe.err, &ne)
}

// staleWindow bounds how soon after the send a closed connection counts as
// one the engine had closed while idle: that close is already waiting in
// the socket when the request is written, so the read fails at once. An
// engine that fails later (it crashed on the request, in prefill) had the
// request; it is not sent again.
const staleWindow = 100 * time.Millisecond

// isStale reports a failure that a connection closed by its peer while
// idle explains: writing the request hit the peer's close, or the
// connection closed before any response byte, right after the send.
func isStale(err error) bool {
	var xe *exchangeError
	if !errors.As(err, &xe) || xe.connect {
		return false
	}
	if !xe.sent && (errors.Is(xe.err, syscall.EPIPE) || errors.Is(xe.err, syscall.ECONNRESET)) {
		return true
	}
	return xe.waited <= staleWindow && isClosedBeforeResponse(xe.err)
}

// headersTooLarge reports response headers that did not fit the read
// buffer (Config.MaxUpstreamHeaderBytes).
func headersTooLarge(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// upstreamBody is a streamed upstream response body. Read and close run on
// the request's goroutine only; a concurrent abort cuts the connection
// (cut), which makes a blocked Read return, and Read reads nothing after.
type upstreamBody struct {
	hc      *fasthttp.HostClient
	release func(reuse bool, why endreason.ConnDiscard) // to the pool, or closed (why: counted)
	conn    net.Conn
	src     bodySource
	frame   framing
	resp    *fasthttp.Response
	ab      *control
	counted *countingConn // the connection, when it counts arrivals
	err     error         // what ended the body before its end: bad framing, the connection's end
	open    bool
}

// start streams resp's body, the headers having been read through head.
func (b *upstreamBody) start(hc *fasthttp.HostClient, release func(bool, endreason.ConnDiscard), conn net.Conn, head *bufio.Reader, resp *fasthttp.Response, ab *control) {
	*b = upstreamBody{hc: hc, release: release, conn: conn, src: bodySource{hc: hc, head: head, conn: conn}, frame: b.frame, resp: resp, ab: ab, counted: countedConn(conn), open: true}
	switch n := resp.Header.ContentLength(); {
	case !hasBody(resp.Header.StatusCode()):
		b.frame.reset(framingLength, 0)
	case n == -1:
		b.frame.reset(framingChunked, 0)
	case n >= 0:
		b.frame.reset(framingLength, int64(n))
	default: // -2: neither a length nor chunked
		b.frame.reset(framingClose, 0)
	}
}

// hasBody reports a status whose response has a body, as fasthttp's own
// reading decides (RFC 9112 §6.3: none for 1xx, 204 and 304).
func hasBody(status int) bool {
	switch {
	case status < 100:
		return true
	case status < 200, status == fasthttp.StatusNoContent, status == fasthttp.StatusNotModified:
		return false
	}
	return true
}

// bodySource is what an upstream body's reader reads: first what the
// headers' reader had read past the headers, then the connection. The
// headers' reader goes back to its pool as soon as it is empty.
type bodySource struct {
	hc   *fasthttp.HostClient
	head *bufio.Reader
	conn net.Conn
}

func (s *bodySource) Read(p []byte) (int, error) {
	if s.head != nil {
		if s.head.Buffered() > 0 {
			n, err := s.head.Read(p) // copies what it holds, reads nothing
			if s.head.Buffered() == 0 {
				s.releaseHead() // now, not at the next read: a stream's next read may be its last
			}
			return n, err
		}
		s.releaseHead()
	}
	return s.conn.Read(p)
}

func (s *bodySource) releaseHead() {
	if s.head != nil {
		s.hc.ReleaseReader(s.head)
		s.head = nil
	}
}

// Read reads the body into p. It returns io.EOF at the body's clean end,
// io.ErrUnexpectedEOF when the connection ends before it, net.ErrClosed
// once the request was aborted (its connection cut).
func (b *upstreamBody) Read(p []byte) (int, error) {
	for len(p) > 0 {
		if b.ab.cut.Load() {
			return 0, net.ErrClosed
		}
		if b.err != nil {
			return 0, b.err
		}
		if b.frame.done {
			return 0, io.EOF
		}
		n, err := b.src.Read(p)
		n, ferr := b.frame.decode(p[:n])
		switch {
		case ferr != nil:
			b.err = ferr
		case b.frame.done: // io.EOF at the next call, after these bytes
		case err == io.EOF && b.frame.kind == framingClose:
			b.frame.done = true // the connection's end is this body's
		case err == io.EOF:
			b.err = io.ErrUnexpectedEOF
		case err != nil:
			return n, err // the connection's error, as it is (a deadline may pass and reading go on)
		}
		if n > 0 {
			return n, nil
		}
	}
	return 0, nil
}

// spent reports that Read returns at once without reading: the body ended,
// failed, or was cut.
func (b *upstreamBody) spent() bool {
	return b.open && (b.frame.done || b.err != nil || b.ab.cut.Load())
}

// pumpable returns the socket of the body's connection when the body can
// be read in a pump (sock.Conn.Pump): a plain TCP connection whose end the
// watcher reports.
func (b *upstreamBody) pumpable() *sock.Conn {
	if c, ok := b.conn.(*countingConn); ok && c.raw != nil && c.raw.Pumpable() {
		return c.raw
	}
	return nil
}

// trailer returns the body's trailer field name, nil when it had none.
func (b *upstreamBody) trailer(name string) []byte { return b.frame.trailer(name) }

// arrival returns when the connection's last read that returned bytes
// did, on the request's clock (an event the relay has just parsed arrived
// in that read, or in one before it), and stops timing the reads: the
// first token's arrival is the one asked for.
func (b *upstreamBody) arrival() (time.Duration, bool) {
	if b.counted == nil || b.counted.tl == nil || b.counted.readAt < 0 {
		return 0, false
	}
	at := b.counted.readAt
	b.counted.clock(nil)
	return at, true
}

// close releases the body. The connection goes back to the pool only when
// the body was read to its end, exactly (leftover), and nothing went wrong;
// otherwise it is closed, which is also how the upstream learns to stop
// generating.
func (b *upstreamBody) close(discard bool) {
	if !b.open {
		return
	}
	b.open = false
	b.ab.detach()
	if b.counted != nil {
		b.counted.clock(nil) // the connection may serve another request
	}
	reuse := b.frame.done && !discard && b.frame.kind != framingClose && !b.resp.ConnectionClose()
	var why endreason.ConnDiscard
	if reuse {
		why = b.leftover()
		reuse = why == ""
	}
	if !reuse {
		_ = b.conn.Close() // before releasing the reader, so nothing can read it again
	}
	b.src.releaseHead()
	b.release(reuse, why)
}

// leftover says why a connection whose response reached its framing's
// end must still not go back to the pool: bytes read past that end (with
// the body's last bytes, or still in the headers' reader, as behind a
// response without a body), or its end already reported; "" when there is
// nothing, the connection then watched while idle (which reports bytes
// already waiting in the socket at once).
func (b *upstreamBody) leftover() endreason.ConnDiscard {
	if b.frame.extra || (b.src.head != nil && b.src.head.Buffered() > 0) {
		return endreason.DiscardBytesPastEnd
	}
	if b.counted != nil {
		return b.counted.park()
	}
	return ""
}
