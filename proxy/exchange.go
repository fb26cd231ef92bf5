package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

// exchange is one request from handler entry to its record. For a streamed
// response it is also the body fasthttp writes to the client: each Read
// returns (part of) one upstream event, which fasthttp sends as one chunk and
// flushes, so entering the next Read means the previous bytes reached the
// client socket. fasthttp calls CloseWithError once when the response is
// over; that, or the handler for responses that are not streamed, emits the
// record. Exchanges are pooled; one goroutine at a time owns one, except for
// ctl, which the watcher and the deadline timer also touch.
type exchange struct {
	p   *Proxy
	gen uint64
	ctl control

	rec   record.Record
	facts endreason.Facts
	tc    traceContext

	req     fasthttp.Request
	resp    fasthttp.Response
	body    upstreamBody
	dec     decoder  // for a compressed upstream stream
	enc     *encoder // for a compressed stream to the client
	scan    *sse.Scanner
	lines   *engines.LineScanner // for NDJSON streams (Ollama's native API)
	ndjson  bool
	readers []engines.Reader // one per engine kind met, kept with the exchange
	rd      engines.Reader   // this request's
	peek    func(name string) []byte
	reqJSON fastjson.Parser

	// vLLM's usage chunk carries its timing: asked for when the client did
	// not, and then kept from the client.
	includeUsage bool
	dropUsage    bool
	sendBody     []byte     // the upstream request body when it differs from the client's
	cw           *connWatch // the client connection's disconnect registration
	gone         func()     // this request's callback on it
	scratch      []byte

	// What the gateway gave this request.
	dl        deadlines
	up        *gateway.Upstream // nil until routed
	release   func()            // the admission slot; nil when none is held
	res       gateway.Reservation
	hasRes    bool
	promptEst int // the gateway's prompt-token estimate, for settling quota

	// The event being handed to fasthttp.
	out        []byte        // its bytes not yet returned by Read
	outParsed  time.Duration // when it was parsed
	outContent bool          // it carries generated content
	handedOut  bool          // the last Read returned bytes
	// contentReads and contentBlocked are the upstream read count and the
	// time blocked on the client when the last content event was parsed:
	// both unchanged at the next one means both came in one upstream read.
	contentReads   uint64
	contentBlocked time.Duration
	// enginePhase is the phase of the engine's last progress comment.
	enginePhase endreason.Phase
	lastReturn  time.Duration // when the last Read returned
	readErr     error         // the error Read returned, if any
	done        bool          // the record was emitted
	streaming   bool          // handed to fasthttp as the response body

	// The client asked for its own breakdown (and its key may have it);
	// respHeader receives its Server-Timing trailer (set when the stream
	// starts, cleared at finish).
	breakdown     bool
	breakdownSent bool
	respHeader    *fasthttp.ResponseHeader

	// Read by the deadline timer.
	firstToken atomic.Bool
	lastEvent  atomic.Int64 // offset of the last parsed event, ns
}

func newExchange(p *Proxy) *exchange {
	x := &exchange{p: p, scan: sse.NewScanner(nil, p.cfg.MaxEventBytes), lines: engines.NewLineScanner(nil, p.cfg.MaxEventBytes)}
	x.peek = func(name string) []byte { return x.resp.Header.Peek(name) }
	return x
}

// begin starts a request: the clock runs from here.
func (x *exchange) begin(ctx *fasthttp.RequestCtx) {
	x.rec.Timeline.Start(x.p.clock, time.Now())
	x.gen = x.ctl.begin(x.rec.Timeline.Now)
	x.rec.Method = string(ctx.Method())
	x.rec.Path = string(ctx.Path())
	x.rec.BytesIn = int64(len(ctx.Request.Body()))
	if id := ctx.Request.Header.Peek("X-Request-Id"); saneRequestID(id) {
		x.rec.RequestID = string(id)
	} else {
		x.rec.RequestID = newRequestID()
	}
	x.tc = continueOrStart(ctx.Request.Header.Peek("traceparent"))
	x.breakdown = len(ctx.Request.Header.Peek(breakdownHeader)) > 0
	x.rec.TraceID, x.rec.SpanID, x.rec.ParentID, x.rec.TraceFlags = x.tc.trace, x.tc.span, x.tc.parent, x.tc.flags
	x.p.inflight.Add(1)
	if t := x.p.cfg.Tracker; t != nil {
		t.RequestStarted()
	}
}

// watchClient points the client connection's disconnect registration at
// this request: if the client leaves, the request is aborted.
func (x *exchange) watchClient(conn any) {
	v, ok := x.p.conns.Load(conn)
	if !ok {
		return // a connection the watcher cannot see (a wrapper hiding its socket)
	}
	gen := x.gen
	x.gone = func() { x.ctl.abort(gen, errClientGone) }
	x.cw = v.(*connWatch)
	x.cw.arm(&x.gone)
}

// armDeadlines starts the deadline timer for this request.
func (x *exchange) armDeadlines(d deadlines) {
	if d.ttft <= 0 && d.total <= 0 && d.idle <= 0 {
		return
	}
	now := x.rec.Timeline.Now()
	first := nextDeadline(d, now, false, 0)
	if first < 0 {
		return
	}
	x.ctl.arm(x.gen, first, func() (time.Duration, error) {
		now := x.rec.Timeline.Now()
		sawFirst := x.firstToken.Load()
		last := time.Duration(x.lastEvent.Load())
		switch {
		case d.total > 0 && now >= d.total:
			return 0, errTotalDeadline
		case !sawFirst && d.ttft > 0 && now >= d.ttft:
			return 0, errTTFTDeadline
		case sawFirst && d.idle > 0 && now-last >= d.idle:
			return 0, errIdleDeadline
		}
		next := nextDeadline(d, now, sawFirst, last)
		if next < 0 {
			next = time.Hour // nothing left to enforce: look again much later
		}
		return next, nil
	})
}

// nextDeadline returns the delay from now until the earliest deadline that
// still applies, or -1 when none does.
func nextDeadline(d deadlines, now time.Duration, sawFirst bool, last time.Duration) time.Duration {
	next := time.Duration(-1)
	consider := func(at time.Duration) {
		if wait := max(at-now, time.Millisecond); next < 0 || wait < next {
			next = wait
		}
	}
	if d.total > 0 {
		consider(d.total)
	}
	if !sawFirst && d.ttft > 0 {
		consider(d.ttft)
	}
	if sawFirst && d.idle > 0 {
		consider(last + d.idle)
	}
	return next
}

// Read hands fasthttp the next bytes of the stream. See the type comment.
func (x *exchange) Read(p []byte) (n int, err error) {
	defer func() {
		if v := recover(); v != nil {
			n, err = 0, x.panicked(v)
		}
		if err != nil && err != io.EOF {
			x.readErr = err
		}
	}()
	now := x.rec.Timeline.Now()
	if x.handedOut {
		x.handedOut = false
		if x.firstToken.Load() {
			x.rec.Stream.Blocked += now - x.lastReturn
		}
		if len(x.out) == 0 {
			x.flushed(now)
		}
	}
	if len(x.out) == 0 {
		if err := x.nextEvent(); err != nil {
			return 0, err
		}
		if x.enc != nil && !x.enc.closed {
			x.out = x.enc.encode(x.out)
		}
	}
	n = copy(p, x.out)
	x.out = x.out[n:]
	x.handedOut = true
	x.rec.BytesOut += int64(n)
	x.lastReturn = x.rec.Timeline.Now()
	return n, nil
}

// flushed records that the event handed out last reached the client socket.
func (x *exchange) flushed(now time.Duration) {
	x.rec.Stream.Flushed(now - x.outParsed)
	if x.outContent {
		x.rec.Timeline.Mark(stages.FirstTokenFlushed)
	}
}

// nextEvent parses upstream events until one is to be forwarded, and makes
// it the current output. Engine timing comments are consumed, not forwarded,
// unless configured otherwise.
func (x *exchange) nextEvent() error {
	tl := &x.rec.Timeline
	hb := x.p.cfg.Heartbeat
	for {
		if hb > 0 && !x.ndjson {
			_ = x.body.conn.SetReadDeadline(time.Now().Add(hb))
		}
		ev, err := x.next()
		if err != nil {
			if hb > 0 && isTimeout(err) && x.ctl.aborted() == nil {
				// The client is always between two whole events here (an
				// upstream event arriving in pieces stays in the scanner), so
				// the heartbeat never splits one.
				x.out, x.outParsed, x.outContent = heartbeat, tl.Now(), false
				return nil
			}
			return x.streamEnd(err)
		}
		now := tl.Now()
		x.lastEvent.Store(int64(now))
		content := false
		if ev.Comments > 0 {
			signal := true // a comment of the engine's protocol, for us
			switch c := ev.Comment; {
			case bytes.HasPrefix(c, engines.ServerTimingPrefix):
				if engines.ParseServerTiming(c[len(engines.ServerTimingPrefix):], tl) > 0 {
					x.rec.EngineSource = "server-timing"
				}
			case bytes.HasPrefix(c, engines.PhasePrefix):
				if p := engines.ParsePhase(c[len(engines.PhasePrefix):]); p != endreason.PhaseNone {
					x.enginePhase = p
				}
			default:
				signal = false
			}
			if signal && !ev.HasData && !x.p.cfg.PassEngineTiming {
				continue
			}
		}
		if ev.HasData {
			tl.Mark(stages.FirstEvent)
			x.rec.Stream.Events++
			s := x.rd.Event(ev.Data, tl)
			if s.BadUTF8 {
				x.facts.Read = endreason.ReadBadUTF8
				return x.failStream(errInvalidUTF8)
			}
			if s.Malformed {
				x.facts.Read = endreason.ReadMalformed
				return x.failStream(errMalformedEvent)
			}
			x.observe(s, now)
			content = s.Content
			if x.dropUsage && s.UsageOnly {
				continue // we asked for it; the client did not
			}
		}
		x.out, x.outParsed, x.outContent = ev.Raw, now, content
		if len(x.out) > 0 {
			return nil
		}
	}
}

// next returns the next upstream block: an SSE event, or an NDJSON line in
// the same shape.
func (x *exchange) next() (sse.Event, error) {
	if !x.ndjson {
		return x.scan.Next()
	}
	raw, line, err := x.lines.Next()
	return sse.Event{Raw: raw, Data: line, HasData: len(line) > 0, Retry: -1}, err
}

// observe folds what an event said into the request's facts and clock.
func (x *exchange) observe(s engines.Event, now time.Duration) {
	if s.Timing {
		x.rec.EngineSource = x.rd.Kind()
	}
	if s.Error {
		x.facts.ErrorEvent = true
	}
	if s.Finish != endreason.FinishNone {
		x.facts.Finish = s.Finish
	}
	if s.Done {
		x.facts.Done = true
	}
	if s.Usage {
		x.rec.UsageReported = true
		x.rec.TokensOut, x.rec.TokensIn = s.CompletionTokens, s.PromptTokens
	}
	if s.Content {
		if reads, ok := x.body.readCount(); ok {
			// Events that piled up while we were blocked on a slow client
			// were not held back upstream: they do not count.
			st := &x.rec.Stream
			if st.ContentEvents > 0 && reads == x.contentReads && st.Blocked-x.contentBlocked < clientMasksArrival {
				st.Together++
				if st.ContentEvents == 1 {
					st.FirstTogether = true
				}
			}
			x.contentReads, x.contentBlocked = reads, st.Blocked
		}
		tl := &x.rec.Timeline
		tl.Mark(stages.FirstToken)
		tl.MarkAt(stages.LastToken, now)
		if !x.firstToken.Swap(true) && x.p.cfg.IdleTimeout > 0 {
			// From now on the idle deadline applies; the timer rechecks
			// it when it fires, so this is the only reset.
			x.ctl.rearm(x.gen, nextDeadline(x.dl, now, true, now))
		}
		// Gaps are measured without the time the proxy was blocked writing to
		// the client (it does not read the upstream meanwhile): a slow client
		// shows up as transport, not as decode.
		x.rec.Stream.Content(now-x.rec.Stream.Blocked, x.p.cfg.StallThreshold)
	}
}

// heartbeat is the comment block sent after Config.Heartbeat of upstream
// silence, at an event boundary only. Clients ignore comments.
var heartbeat = []byte(": keep-alive\n\n")

// isTimeout reports a read deadline passing (the heartbeat's wake-up).
func isTimeout(err error) bool {
	// Unwrapped by hand: errors.As into an interface variable allocates, and
	// this runs at every stream's end.
	for ; err != nil; err = errors.Unwrap(err) {
		if t, ok := err.(interface{ Timeout() bool }); ok {
			return t.Timeout()
		}
	}
	return false
}

var (
	errMalformedEvent = errors.New("upstream sent an event whose data is not JSON")
	errInvalidUTF8    = errors.New("upstream sent an event that is not valid UTF-8")
	errNoDone         = errors.New("upstream ended the stream without a finish reason or [DONE]")
)

// streamEnd turns the end of the upstream stream into facts and the error
// Read returns: io.EOF only for a stream that really finished, so fasthttp
// writes the final chunk; anything else cuts the client's stream.
func (x *exchange) streamEnd(err error) error {
	if cause := x.ctl.aborted(); cause != nil {
		return cause
	}
	if err == io.EOF {
		x.facts.Read = endreason.ReadClean
		// A stream that ends cleanly after an error event is ended by the
		// engine: the client has the error. Any other end without a finish
		// or an end marker is cut, so it is never taken for complete.
		if !x.facts.Done && x.facts.Finish == endreason.FinishNone && !x.facts.ErrorEvent {
			return x.failStream(errNoDone)
		}
		if x.breakdown && !x.breakdownSent && !x.ndjson {
			// One more block before the end: the client's own breakdown.
			// The scanner returns io.EOF again on the next call.
			x.breakdownSent = true
			x.out, x.outParsed, x.outContent = x.appendBreakdownComment(), x.rec.Timeline.Now(), false
			return nil
		}
		if x.enc != nil && !x.enc.closed {
			x.out, x.outParsed, x.outContent = x.enc.close(), x.rec.Timeline.Now(), false
			return nil
		}
		return io.EOF
	}
	x.facts.Read = readEnd(err)
	return x.failStream(err)
}

// readEnd classifies an upstream read error from its type, never its text.
func readEnd(err error) endreason.ReadEnd {
	switch {
	case errors.Is(err, sse.ErrEventTooLarge):
		return endreason.ReadTooLarge
	case errors.Is(err, syscall.ECONNRESET):
		return endreason.ReadReset
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return endreason.ReadTruncated
	}
	return endreason.ReadFailed
}

// failStream records err as the request's error and returns it.
func (x *exchange) failStream(err error) error {
	if x.rec.Error == "" {
		x.rec.Error = err.Error()
	}
	return err
}

// CloseWithError is called by fasthttp once, when the streamed response is
// over: err is nil after a clean end, the error our Read returned, or the
// error writing to the client.
func (x *exchange) CloseWithError(err error) error {
	if err != nil && x.readErr == nil {
		// A write to the client failed: the client is gone.
		x.ctl.abort(x.gen, errClientGone)
	}
	x.finish()
	x.p.release(x)
	return nil
}

// panicked turns a panic on the request path into an error and a record
// entry; the process keeps serving.
func (x *exchange) panicked(v any) error {
	err := fmt.Errorf("proxy panic: %v", v)
	x.p.log.Error().Str("request_id", x.rec.RequestID).Err(err).Msg("recovered")
	x.facts.Rejected, x.facts.RejectedDetail = endreason.WorkerFailure, endreason.DetailProxyPanic
	x.rec.Error = err.Error()
	return err
}

// finish is the one finalizer: it releases the upstream, decides the end
// reason and emits the record. Whoever owns x then returns it to the pool:
// the handler, or CloseWithError for a streamed response.
func (x *exchange) finish() {
	if x.done {
		return
	}
	x.done = true
	if x.cw != nil {
		x.cw.disarm()
	}
	tl := &x.rec.Timeline
	abortedAt, closedAt, cause := x.ctl.end()
	if x.body.open {
		x.body.close(cause != nil || x.facts.Read != endreason.ReadClean)
		if cause != nil && closedAt == 0 {
			closedAt = tl.Now()
		}
	}
	tl.Mark(stages.Done)
	x.respHeader = nil
	if x.facts.Stream {
		x.rec.Buffering |= arrivalBuffering(&x.rec.Stream)
	}

	// The body is read: trailers have arrived.
	if x.rec.EngineSource == "" && engines.ParseServerTiming(x.resp.Header.Peek("Server-Timing"), tl) > 0 {
		x.rec.EngineSource = "server-timing"
	}
	if x.rd != nil && x.rd.Header(x.peek, tl) && x.rec.EngineSource == "" {
		x.rec.EngineSource = x.rd.Kind()
	}
	if engines.InferQueue(tl) {
		x.rec.EngineInferred = true
	}
	x.applyCause(cause, abortedAt, closedAt)
	x.rec.Reason, x.rec.Detail = endreason.Classify(x.facts)
	x.settleGateway()
	if x.rec.Reason == endreason.ClientCancel {
		x.rec.Phase = endreason.PhaseOf(tl.Has(stages.Admitted), tl.Has(stages.FirstToken), x.engineSaidPhase())
	}
	if !x.rec.UsageReported {
		x.rec.TokensOut = x.rec.Stream.ContentEvents
	}
	x.p.inflight.Add(-1)
	if t := x.p.cfg.Tracker; t != nil {
		t.RequestEnded()
	}
	x.p.sink.Emit(&x.rec) // last: a sink that panics cannot skip the rest
}

// settleGateway gives back what the gateway lent: the upstream's health
// verdict, the admission slot, the quota reservation (charged with the real
// usage, or the estimate where the upstream reported none).
func (x *exchange) settleGateway() {
	if x.up != nil {
		x.p.gw.Done(x.up, !upstreamFault(&x.facts))
	}
	if x.release != nil {
		x.release()
	}
	if x.hasRes {
		if x.facts.Rejected != 0 || !x.rec.Timeline.Has(stages.UpstreamSent) {
			x.res.Cancel() // refused, or never reached the engine: not charged
		} else {
			in := x.rec.TokensIn
			if in == 0 {
				in = x.promptEst
			}
			x.res.Settle(in + x.rec.TokensOut)
		}
	}
}

// upstreamFault reports failures that count against the upstream's health:
// it could not be reached, failed, or broke the stream.
func upstreamFault(f *endreason.Facts) bool {
	return f.ConnectFailed || f.ClosedBeforeResponse || f.Status >= 500 || f.ErrorEvent ||
		f.Finish == endreason.FinishError || f.Read == endreason.ReadReset ||
		f.Read == endreason.ReadTruncated || f.Read == endreason.ReadFailed
}

// applyCause turns an abort cause into facts and the cancellation cost.
func (x *exchange) applyCause(cause error, abortedAt, closedAt time.Duration) {
	if cause == nil {
		return
	}
	var de *deadlineError
	switch {
	case cause == errClientGone:
		x.facts.ClientGone = true
		if closedAt > 0 {
			x.rec.CancelToClose = max(closedAt-abortedAt, 0)
		}
	case errors.As(cause, &de):
		x.facts.Deadline = de.detail
		if x.rec.Error == "" {
			x.rec.Error = de.msg
		}
	}
}

// engineSaidPhase is where the engine said the request was: its last
// progress comment, or, for a stream from the reference engine (which sends
// a stream's headers once the request is prepared), preparing while it had
// the request and no headers yet. PhaseNone when it said nothing (a
// non-streamed response's headers come with its end, and the hold_headers
// fault holds a stream's until the first token).
func (x *exchange) engineSaidPhase() endreason.Phase {
	tl := &x.rec.Timeline
	if x.enginePhase == endreason.PhaseNone && x.rec.Streaming && x.rd != nil && x.rd.Kind() == engines.KindReference &&
		tl.Has(stages.UpstreamSent) && !tl.Has(stages.UpstreamHeaders) &&
		!engines.WithholdsHeaders(x.req.Header.Peek(engines.FaultHeader)) {
		return endreason.PhasePreparing
	}
	return x.enginePhase
}

// reset readies a released exchange for the pool.
func (x *exchange) reset() {
	x.rec.Stream.Release()
	x.rec.Reset()
	x.facts = endreason.Facts{}
	x.req.Reset()
	x.resp.Reset()
	x.body = upstreamBody{}
	x.scan.Reset(nil)
	x.cw, x.gone = nil, nil
	x.out, x.outParsed, x.outContent, x.handedOut, x.lastReturn, x.readErr, x.done, x.streaming = nil, 0, false, false, 0, nil, false, false
	x.contentReads, x.contentBlocked, x.enginePhase = 0, 0, endreason.PhaseNone
	x.breakdown, x.breakdownSent, x.respHeader = false, false, nil
	x.dl, x.up, x.release, x.res, x.hasRes, x.promptEst = deadlines{}, nil, nil, gateway.Reservation{}, false, 0
	x.dec.src = nil
	if x.enc != nil {
		x.enc.release()
		x.enc = nil
	}
	x.lines.Reset(nil)
	x.ndjson, x.rd, x.includeUsage, x.dropUsage, x.sendBody = false, nil, false, false, x.sendBody[:0]
	x.firstToken.Store(false)
	x.lastEvent.Store(0)
}
