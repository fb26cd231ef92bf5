package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// This file is the path of one request, top to bottom: Handler, serve (the
// gateway's steps, routing and admission, the upstream round trip), then a
// streamed response (startStream; the relay carries it on) or a whole one
// (relayWhole), the failures on the way, and finish, the one end of every
// request.

// exchange is one request, from handler entry to its record. Its parts say
// what they own:
//   - fin, the finalizer: the record and the facts of the end, classified
//     and emitted exactly once;
//   - lease: what the gateway granted, given back once at the end;
//   - relay: the upstream response body on its way to the client;
//   - sig: what the engine says about the request (proxy/engines);
//   - ctl: the part other goroutines touch (the client watcher, the
//     deadline timer), to abort the request.
//
// Exchanges are pooled. One goroutine at a time owns one: the handler, or,
// once a streamed response starts, the stream's own goroutine (detach).
type exchange struct {
	p   *Proxy
	gen uint64 // ctl's generation for this request
	ctl control

	fin   finalizer
	lease lease
	relay relay
	sig   engines.Report
	tc    traceContext
	// engine is the upstream the request went to, whose engine kind a
	// response that names its engine settles (learnEngine); nil until sent.
	engine *upstream
	fl     flightTicket // its place among its upstream's requests in flight

	resp     fasthttp.Response        // from the upstream
	peekResp func(name string) []byte // its headers
	peekEnd  func(name string) []byte // its trailers, then its headers
	sendBody []byte                   // the upstream request body when it differs from the client's
	scratch  []byte

	client    clientSide
	out       clientStream // a streamed response's writes to the client
	streaming bool         // the response belongs to the stream's goroutine (detach)
}

// clientSide is what the request knows of its client.
type clientSide struct {
	conn      net.Conn        // the client's connection
	watch     *sock.ConnWatch // the client connection's disconnect registration
	breakdown bool            // it asked for its own breakdown
	usage     bool            // it asked for the usage chunk
	bodyHeld  int             // bytes of the body memory budget its body holds
	bodyKey   string          // the key whose share they count in ("": none)
}

// jsonParsers parse request bodies for the gateway's check. They are
// shared rather than one per exchange: a streaming exchange is done with
// its request's JSON, and a parser keeps the memory of the largest body it
// parsed.
var jsonParsers fastjson.ParserPool

func newExchange(p *Proxy) *exchange {
	x := &exchange{p: p}
	x.fin.log = &p.log
	x.relay = newRelay(relayWiring{cfg: &p.cfg, fin: &x.fin, ctl: &x.ctl, sig: &x.sig,
		onFirstToken: x.firstTokenParsed, onEngineDone: x.engineDone})
	x.peekResp = func(name string) []byte { return x.resp.Header.Peek(name) }
	x.peekEnd = func(name string) []byte {
		if v := x.relay.src.body.trailer(name); v != nil {
			return v
		}
		return x.resp.Header.Peek(name)
	}
	return x
}

// firstTokenParsed marks when the first content event arrived (the
// upstream read that brought it), and moves the deadlines on.
func (x *exchange) firstTokenParsed(now time.Duration) {
	if at, ok := x.relay.src.body.arrival(); ok {
		x.fin.rec.Timeline.MarkAt(stages.FirstTokenArrived, at)
	}
	x.fl.firstToken()
	x.lease.choice.Prefilled() // no longer ahead of the requests routed after it
	x.firstTokenSeen(now)
}

// engineDone takes the request out of its upstream's flight when the
// engine said it is done generating: its slot is free from then on.
func (x *exchange) engineDone(now time.Duration) {
	x.fl.end(x.fin.rec.Timeline.Origin() + int64(now))
}

// reset readies a finished exchange for the pool.
func (x *exchange) reset() {
	x.fin.reset()
	x.lease = lease{}
	x.relay.reset()
	x.sig.Reset()
	x.engine = nil
	x.fl = flightTicket{}
	x.resp.Reset()
	x.client = clientSide{}
	x.out.dropGathered() // a stream cut with events gathered
	x.out = clientStream{buf: x.out.buf[:0]}
	x.streaming = false
}

// Handler returns the client-facing request handler.
func (p *Proxy) Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		note := p.takeHead(ctx)
		refused := note.refused()
		putHead(note)
		if string(ctx.Path()) == "/health" {
			if refused != nil { // a path checkHead did not take for /health: its body is unread
				ctx.SetConnectionClose()
			}
			p.health(ctx) // probes are not requests to the model: no record
			return
		}
		x := p.acquire()
		x.begin(ctx)
		defer func() {
			v := recover()
			if v != nil && !x.fin.done {
				err := x.fin.panicked(v)
				x.respondError(ctx, fasthttp.StatusInternalServerError, "internal_error", err.Error())
				x.finish()
			} else if v != nil {
				p.log.Error().Str("request_id", x.fin.rec.RequestID).Interface("panic", v).Msg("recovered after the record")
			}
			if !x.streaming { // a streamed x belongs to the stream's goroutine
				p.release(x)
			}
		}()
		x.serve(ctx, refused)
	}
}

// begin starts a request: the clock runs from here.
func (x *exchange) begin(ctx *fasthttp.RequestCtx) {
	rec := &x.fin.rec
	rec.Timeline.Start(x.p.clock, time.Now())
	x.gen = x.ctl.begin(rec.Timeline.Now)
	rec.Method = string(ctx.Method())
	rec.Path = string(ctx.Path())
	if id := ctx.Request.Header.Peek("X-Request-Id"); saneRequestID(id) {
		rec.RequestID = string(id)
	} else {
		rec.RequestID = newRequestID()
	}
	x.tc = continueOrStart(ctx.Request.Header.Peek("traceparent"))
	x.client.conn = ctx.Conn()
	x.client.breakdown = len(ctx.Request.Header.Peek(breakdownHeader)) > 0
	rec.TraceID, rec.SpanID, rec.ParentID, rec.TraceFlags = x.tc.trace, x.tc.span, x.tc.parent, x.tc.flags
	x.p.started(x)
}

// serve runs the request up to the point where the response is streaming
// (its own goroutine then owns x, detach.go) or finished. Each gateway step
// sits between two marks of the request clock. refused is the head check's
// answer, when it refused the head (frontdoor.go).
func (x *exchange) serve(ctx *fasthttp.RequestCtx, refused *gateway.Rejection) {
	p, rec := x.p, &x.fin.rec
	snap := p.gw.Snapshot() // one configuration for the whole request
	// Watch the client from the start: one that leaves our queue is seen too.
	x.watchClient(x.client.conn)

	key, rej := snap.Authenticate(ctx.Request.Header.Peek("Authorization"))
	if key != nil {
		rec.Key = key.Name
	}
	switch {
	case refused != nil: // fasthttp read none of its body
		x.rejectGateway(ctx, refused)
		lingerClose(ctx)
		return
	case rej != nil:
		x.rejectUnread(ctx, rej)
		return
	case !x.readBody(ctx, snap, rec.Key):
		return
	}
	x.client.breakdown = x.client.breakdown && snap.AllowBreakdown(key)
	req, dl := gateway.Request{Route: snap.Routes()[0]}, gateway.Deadlines{FirstToken: p.cfg.FirstTokenTimeout, Total: p.cfg.TotalTimeout}
	path := ctx.Path()
	ep, completion := completionEndpoint(ctx.IsPost(), path)
	if completion {
		jp := jsonParsers.Get()
		req, rej = snap.CheckRequest(jp, ep, ctx.PostBody())
		defer req.Release()           // after forward's last Choose
		rec.Model = string(req.Model) // a refused request's too, when its body names one
		jsonParsers.Put(jp)           // req.Model, which aliased it, is copied
		req.Model = nil
		if rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		route := req.Route
		rec.Streaming, x.lease.promptEst = req.Stream, req.PromptTokens
		x.client.usage = req.IncludeUsage
		quotaStart := rec.Timeline.Now()
		x.lease.res, rej = snap.Admit(key, req.Reserve())
		rec.QuotaChecked, rec.QuotaTime, rec.QuotaFallback = key.HasQuota(), rec.Timeline.Now()-quotaStart, x.lease.res.Fallback()
		if rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		x.lease.hasRes = true
		h := &ctx.Request.Header
		if dl, rej = route.Deadlines(dl, h.Peek(gateway.HeaderDeadline), h.Peek(gateway.HeaderTTFTDeadline)); rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		if x.lease.slo, rej = route.SLO(h.Peek(gateway.HeaderTTFTSLO)); rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		rec.TTFTSLO, req.SLO = x.lease.slo, x.lease.slo
	} else if !p.ownGW && ctx.IsGet() && bytes.Equal(path, pathModels) {
		// With a config file, the routes are the models.
		rec.Timeline.Mark(stages.GatewayDone)
		x.scratch = snap.AppendModels(x.scratch[:0])
		x.respondJSON(ctx, fasthttp.StatusOK, x.scratch)
		x.finish()
		return
	}
	rec.Timeline.Mark(stages.GatewayDone)
	x.lease.dl = deadlines{ttft: dl.FirstToken, total: dl.Total, idle: p.cfg.IdleTimeout}
	x.armDeadlines()

	if !x.forward(ctx, snap, &req, completion) {
		return
	}
	x.respond(ctx)
}

// forward routes the request, waits for admission and sends it upstream,
// reading the response headers; on a failed connect it tries once more on
// another upstream (nothing reached the engine). It reports whether there
// is a response to relay; when not, the request is answered and finished.
func (x *exchange) forward(ctx *fasthttp.RequestCtx, snap *gateway.Snapshot, req *gateway.Request, completion bool) bool {
	stripAuth := snap.Config().Auth == gateway.AuthKeys
	up, ok := x.admit(ctx, snap, req, nil)
	if !ok {
		return false
	}
	err := x.roundTrip(ctx, up, completion, stripAuth)
	if connectFailed(err) && x.ctl.aborted() == nil {
		failed := x.lease.up
		x.p.gw.Done(failed, false)
		x.lease.choice.Prefilled()
		x.lease.up = nil
		x.lease.releaseSlot()
		if up, ok = x.admit(ctx, snap, req, failed); ok {
			err = x.roundTrip(ctx, up, completion, stripAuth) // it may run another engine
		} else if x.fin.done {
			return false // the retry itself was answered (a full queue, the client gone)
		} // else no other upstream: answer with the first failure
	}
	if err != nil {
		x.failBeforeResponse(ctx, err)
		return false
	}
	return true
}

// admit chooses an upstream for req (not except) and waits for a slot in
// its admission queue: the route and queue stages. The first choice is
// held to the request's TTFT SLO: one predicted to miss it (not a probe
// past it) goes to the route's fallback pool (req.Route becomes the
// fallback route, for a retry too, and req.SLO none) or is refused. It answers the request itself when that
// fails, except when a retry (except != nil) finds no other upstream: then
// it returns false with nothing sent.
func (x *exchange) admit(ctx *fasthttp.RequestCtx, snap *gateway.Snapshot, req *gateway.Request, except *gateway.Upstream) (*upstream, bool) {
	rec := &x.fin.rec
	req.Spent = rec.Timeline.Now()
	c, rej := snap.Choose(req, except)
	if rej == nil && except == nil {
		if rej = gateway.RefuseSLO(&c, x.lease.slo, req.Spent); rej != nil && req.Route.Fallback != nil {
			// Nothing more is asked of it there: no SLO to place within,
			// nor to probe past.
			req.Route, req.SLO, rec.SLOFallback = req.Route.Fallback, 0, true
			c, rej = snap.Choose(req, nil)
		}
	}
	if rej != nil {
		if except == nil {
			x.rejectGateway(ctx, rej)
		}
		return nil, false
	}
	snap.Commit(req, &c)
	up := c.Upstream
	x.lease.choice = c
	recordChoice(rec, &c, req)
	client, err := x.p.client(up)
	if err != nil {
		x.rejectGateway(ctx, &gateway.Rejection{Status: fasthttp.StatusBadGateway, Type: "upstream_error",
			Message: err.Error(), Reason: endreason.WorkerFailure, Detail: endreason.DetailConnectFailed})
		return nil, false
	}
	x.lease.up, rec.Upstream = up, client.Name
	if l, known := up.EngineLoad(); known {
		rec.EngineLoad, rec.EngineWaiting, rec.EngineRunning = true, l.Waiting, l.Running
	}
	rec.Timeline.Mark(stages.Routed)
	release, rej := up.Acquire(x.ctl.aborts())
	if rej != nil {
		if cause := x.ctl.aborted(); cause != nil {
			x.failAborted(ctx, cause) // the client left, or a deadline fired, while queued
		} else {
			x.rejectGateway(ctx, rej)
		}
		return nil, false
	}
	x.lease.release = release
	rec.Timeline.Mark(stages.Admitted)
	return client, true
}

// roundTrip builds the upstream request for up's engine, sends it and reads
// the response headers.
func (x *exchange) roundTrip(ctx *fasthttp.RequestCtx, up *upstream, completion, stripAuth bool) error {
	// The upstream request is needed until its response's headers are read:
	// it comes from fasthttp's pool, so an open stream does not hold one.
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	x.buildUpstreamRequest(ctx, req, up, stripAuth)
	kind := up.kind.get()
	x.fin.rec.Engine = kind
	x.sig.Begin(engines.KindFor(ctx.Path(), kind), req.Header.Peek)
	x.engine = up
	send, drop := x.sig.UpstreamBody(ctx.Request.Body(), x.sendBody, completion, x.fin.rec.Streaming, x.client.usage)
	if drop {
		x.sendBody = send
		req.SetBodyRaw(send)
	}
	x.relay.dropUsage = drop
	var fl *flightTicket
	if ctx.IsPost() { // what may take one of the engine's slots
		fl = &x.fl
	}
	var err error
	x.fin.rec.UpstreamConn, err = up.roundTrip(req, &x.resp, &x.ctl, &x.fin.rec.Timeline, &x.relay.src.body, fl)
	return err
}

// respond reads the upstream response headers and relays the response: as
// a stream, or whole.
func (x *exchange) respond(ctx *fasthttp.RequestCtx) {
	rec, f := &x.fin.rec, &x.fin.facts
	rec.Timeline.Mark(stages.UpstreamHeaders)
	x.sig.Headers(x.peekResp, &rec.Timeline)
	status := x.resp.StatusCode()
	f.Status = status
	x.lease.closing = x.resp.Header.ConnectionClose()
	rec.Buffering |= shapeBuffering(&x.resp.Header, rec.Streaming)
	if ct := x.resp.Header.ContentType(); status < 300 && (isEventStream(ct) || isNDJSON(ct)) {
		x.startStream(ctx, status, isNDJSON(ct))
		return
	}
	x.relayWhole(ctx, status)
}

// startStream waits for the first event, then hands the response to its
// own goroutine (detach). Until the first event nothing has been sent, so a
// failure still gets a proper error response.
func (x *exchange) startStream(ctx *fasthttp.RequestCtx, status int, ndjson bool) {
	x.fin.facts.Stream = true
	r := &x.relay
	var encoding []byte
	if x.fin.rec.Buffering&record.BufferedCompressed != 0 {
		encoding = x.resp.Header.ContentEncoding()
	}
	if !r.src.start(ndjson, encoding) {
		x.fin.facts.BadContentType = true
		x.failBeforeFirstEvent(ctx, fmt.Errorf("%w: %q", errUnsupportedEncoding, encoding))
		return
	}
	if err := r.nextEvent(); err != nil {
		x.failBeforeFirstEvent(ctx, err)
		return
	}
	x.copyResponseHeaders(ctx)
	if len(encoding) > 0 {
		ctx.Response.Header.Del("Content-Encoding") // the client gets the decoded events
	}
	http10 := !ctx.Request.Header.IsHTTP11()
	if r.breakdown = x.client.breakdown; r.breakdown && !http10 { // a close-delimited body has no trailer
		_ = ctx.Response.Header.SetTrailer("Server-Timing")
		r.trailer = true
	}
	if r.dst.enc = acquireEncoder(x.p.cfg.CompressStreams, ctx.Request.Header.Peek("Accept-Encoding")); r.dst.enc != nil {
		ctx.Response.Header.Set("Content-Encoding", r.dst.enc.name)
		ctx.Response.Header.Add("Vary", "Accept-Encoding")
		r.dst.out = r.dst.enc.encode(r.dst.out) // the first event, read before the response started
	}
	ctx.SetStatusCode(status)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	r.dst.conn = x.client.conn
	r.armStall(x.fin.rec.Timeline.Now()) // the headers and the first event are written next
	x.fin.rec.Status = status
	x.detach(ctx, http10)
}

// endStream ends a streamed response. An error writing to the client means
// it left, or, when the write stall limit passed, that it stopped reading.
func (x *exchange) endStream(clientErr error) {
	switch {
	case clientErr == nil:
	case isTimeout(clientErr):
		x.ctl.failed(x.gen, errClientStalled)
	default:
		x.ctl.failed(x.gen, errClientGone)
	}
	x.finish()
}

// relayWhole forwards a response that is not an event stream: an upstream
// error, a non-streamed completion, or any other path.
func (x *exchange) relayWhole(ctx *fasthttp.RequestCtx, status int) {
	rec, tl := &x.fin.rec, &x.fin.rec.Timeline
	body, err := x.relay.readWhole()
	if err != nil {
		x.failBeforeFirstEvent(ctx, err)
		return
	}
	ct := x.resp.Header.ContentType()
	isJSON := bytes.Contains(ct, []byte("json"))
	if status >= 400 {
		rec.Error = upstreamAnswered(status, body)
	}
	switch {
	case status >= 400 && !isJSON:
		// Keep the status, give the client the error shape it expects, with
		// the upstream's words as they are (the record's are redacted).
		msg := "upstream answered " + strconv.Itoa(status) + ": " + string(excerpt(body, 512))
		x.respondError(ctx, status, "upstream_error", msg)
		x.finish()
		return
	case rec.Streaming && status < 300 && !isJSON:
		x.fin.facts.BadContentType = true
		rec.Error = "upstream answered a stream request with content type " + redact(string(ct))
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", rec.Error)
		x.finish()
		return
	}
	if status < 300 && isJSON {
		s := x.sig.Event(body, tl)
		if s.Malformed || s.BadUTF8 {
			// Nothing was sent yet: the client gets an error, not a broken body.
			x.fin.facts.Read = endreason.ReadMalformed
			if s.BadUTF8 {
				x.fin.facts.Read = endreason.ReadBadUTF8
			}
			x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", x.fin.fail(errMalformedBody).Error())
			x.finish()
			return
		}
		x.relay.observe(s, tl.Now())
		if s.Content {
			markDelivered(tl, s.Answer()) // written with the whole body
		}
	}
	x.copyResponseHeaders(ctx)
	if x.client.breakdown {
		if bd := rec.Breakdown(); bd.OK {
			var v [256]byte // not the relay's scratch: body aliases it
			ctx.Response.Header.SetBytesV("Server-Timing", appendServerTiming(v[:0], &bd))
		}
	}
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
	rec.Status = status
	rec.BytesOut = int64(len(body))
	x.finish()
}

// failBeforeResponse handles an upstream exchange that produced no response.
// The record and the log name the upstream and the error; the client gets
// the code (the detail) and a message that names neither: an upstream's
// name may be its internal address.
func (x *exchange) failBeforeResponse(ctx *fasthttp.RequestCtx, err error) {
	var xe *exchangeError
	rec := &x.fin.rec
	switch {
	case x.ctl.aborted() != nil:
		x.failAborted(ctx, x.ctl.aborted())
		return
	case errors.As(err, &xe) && xe.connect:
		x.fin.facts.ConnectFailed = true
		rec.Error = "upstream " + rec.Upstream + " unreachable: " + err.Error()
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_unreachable", "the upstream could not be reached")
	case headersTooLarge(err):
		x.fin.facts.HeadersTooLarge = true
		rec.Error = "upstream " + rec.Upstream + " sent response headers over " +
			strconv.Itoa(x.p.cfg.MaxUpstreamHeaderBytes) + " bytes (--max-upstream-header-bytes)"
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", "the upstream's response headers were over the proxy's limit")
	case malformedHeaders(err):
		x.fin.facts.MalformedHeaders = true
		rec.Error = "upstream " + rec.Upstream + " sent response headers that could not be parsed"
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", "the upstream's response headers could not be parsed")
	default:
		x.fin.facts.ClosedBeforeResponse = true
		rec.Error = "upstream " + rec.Upstream + " failed before responding: " + err.Error()
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", "the upstream failed before responding")
	}
	x.finish()
}

// failBeforeFirstEvent handles a response that failed before anything was
// sent to the client.
func (x *exchange) failBeforeFirstEvent(ctx *fasthttp.RequestCtx, err error) {
	if cause := x.ctl.aborted(); cause != nil {
		x.failAborted(ctx, cause)
		return
	}
	x.fin.fail(err)
	x.fin.rec.Error = redact(x.fin.rec.Error) // it may quote an upstream header
	x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", x.fin.rec.Error)
	x.finish()
}

// failAborted answers a request that the client or a deadline aborted
// before its response started.
func (x *exchange) failAborted(ctx *fasthttp.RequestCtx, cause error) {
	var de *deadlineError
	if errors.As(cause, &de) {
		x.respondError(ctx, fasthttp.StatusGatewayTimeout, "timeout", de.msg)
	} else {
		// Nobody is listening: record 499 as nginx does, send nothing.
		ctx.SetConnectionClose()
		x.fin.rec.Status = 499
	}
	if cause == errShutdown {
		ctx.SetConnectionClose() // no request on this connection after the cut
	}
	x.finish()
}

// finish is the one end of every request: it lets go of what the request
// holds (the client watch, the upstream connection, the gateway's lease),
// decides the end reason and emits the record, once. Whoever owns x then
// returns it to the pool: the handler, or the stream's goroutine (detach).
func (x *exchange) finish() {
	f := &x.fin
	if f.done {
		return
	}
	f.done = true
	// The record goes out whatever happens below; a panic on the way is
	// recorded as the request's end.
	defer x.p.ended(x)
	defer func() {
		if v := recover(); v != nil {
			f.panicked(v)
			f.rec.Reason, f.rec.Detail = endreason.WorkerFailure, endreason.DetailProxyPanic
			x.lease.choice.Prefilled() // settle may not have run: the request holds no one behind it
		}
	}()
	rec, tl := &f.rec, &f.rec.Timeline
	if x.client.watch != nil {
		x.client.watch.Disarm()
	}
	abortedAt, closedAt, cause := x.ctl.end()
	if clientCause(cause) && closedAt > 0 && f.facts.Stream {
		// The abort closed the upstream: what the client never got is all here.
		rec.TokensAfterCancel = x.relay.undelivered()
	}
	if x.relay.closeUpstream(cause != nil) && cause != nil && closedAt == 0 {
		closedAt = tl.Now()
	}
	tl.Mark(stages.Done)
	if f.facts.Stream {
		rec.Buffering |= arrivalBuffering(&rec.Stream)
	}
	done, _ := tl.At(stages.Done)
	x.fl.end(tl.Origin() + int64(done))
	// The body is read: trailers have arrived.
	x.sig.End(x.peekEnd, tl, x.slotWait())
	rec.EngineSource = x.sig.Source()
	if x.engine != nil {
		x.p.learnEngine(x.engine, x.sig.Recognised())
	}
	f.classify(cause, abortedAt, closedAt)
	x.learn()
	x.lease.settle(x.p.gw, &f.facts, rec)
	f.complete(x.sig.Phase(rec.Streaming, tl))
}

// slotWait is the request's wait for one of its engine's slots as the
// proxy saw it (flight), 0 when nothing says it waited.
func (x *exchange) slotWait() time.Duration {
	tl := &x.fin.rec.Timeline
	sent, ok := tl.At(stages.UpstreamSent)
	first, okF := tl.At(stages.FirstTokenArrived)
	if !okF {
		first, okF = tl.At(stages.FirstToken)
	}
	if !ok || !okF {
		return 0
	}
	w, _ := x.fl.slotWait(tl.Origin()+int64(sent), tl.Origin()+int64(first))
	return w
}

// watchClient points the client connection's disconnect registration at
// this request: if the client leaves, the request is aborted.
func (x *exchange) watchClient(conn any) {
	v, ok := x.p.conns.Load(conn)
	if !ok {
		return // a connection the watcher cannot see (a wrapper hiding its socket)
	}
	// The callback lives outside the exchange: the watcher may still call
	// one it loaded after the request ended and the exchange was reset;
	// the generation makes that call a no-op.
	gen := x.gen
	gone := func() { x.ctl.abort(gen, errClientGone) }
	x.client.watch = v.(*clientConn).watch
	x.client.watch.Arm(&gone)
}

func connectFailed(err error) bool {
	var xe *exchangeError
	return errors.As(err, &xe) && xe.connect
}

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
	pathModels      = []byte("/v1/models")
)

// completionEndpoint says whether a request is a completion the gateway
// checks, and which kind.
func completionEndpoint(post bool, path []byte) (gateway.Endpoint, bool) {
	switch {
	case !post:
		return 0, false
	case bytes.Equal(path, pathChat):
		return gateway.Chat, true
	case bytes.Equal(path, pathCompletions):
		return gateway.Completions, true
	}
	return 0, false
}
