package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Handler returns the client-facing request handler.
func (p *Proxy) Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/health" {
			// Probes are not requests to the model: no record.
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"status":"ok"}`)
			return
		}
		x := p.acquire()
		x.begin(ctx)
		defer func() {
			v := recover()
			if v != nil && !x.done {
				err := x.panicked(v)
				x.respondError(ctx, fasthttp.StatusInternalServerError, "internal_error", err.Error())
				x.finish()
			} else if v != nil {
				p.log.Error().Str("request_id", x.rec.RequestID).Interface("panic", v).Msg("recovered after the record")
			}
			if !x.streaming { // a streamed x belongs to fasthttp until CloseWithError
				p.release(x)
			}
		}()
		x.serve(ctx)
	}
}

var (
	pathChat        = []byte("/v1/chat/completions")
	pathCompletions = []byte("/v1/completions")
)

// serve runs the request up to the point where the response is streaming
// (fasthttp then owns x until CloseWithError) or finished. Each gateway step
// sits between two marks of the request clock.
func (x *exchange) serve(ctx *fasthttp.RequestCtx) {
	p, tl := x.p, &x.rec.Timeline
	snap := p.gw.Snapshot() // one configuration for the whole request
	// Watch the client from the start: one that leaves our queue is seen too.
	x.watchClient(ctx.Conn())

	key, rej := snap.Authenticate(ctx.Request.Header.Peek("Authorization"))
	if rej != nil {
		x.rejectGateway(ctx, rej)
		return
	}
	if key != nil {
		x.rec.Key = key.Name
	}
	x.breakdown = x.breakdown && snap.AllowBreakdown(key)
	route, dl := snap.Routes()[0], gateway.Deadlines{FirstToken: p.cfg.FirstTokenTimeout, Total: p.cfg.TotalTimeout}
	path := ctx.Path()
	ep, completion := completionEndpoint(ctx.IsPost(), path)
	if completion {
		req, rej := snap.CheckRequest(&x.reqJSON, ep, ctx.PostBody())
		if rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		x.rec.Model, x.rec.Streaming, x.promptEst, route = string(req.Model), req.Stream, req.PromptTokens, req.Route
		x.includeUsage = req.IncludeUsage
		if x.res, rej = snap.Admit(key, req.Reserve()); rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
		x.hasRes = true
		h := &ctx.Request.Header
		if dl, rej = route.Deadlines(dl, h.Peek(gateway.HeaderDeadline), h.Peek(gateway.HeaderTTFTDeadline)); rej != nil {
			x.rejectGateway(ctx, rej)
			return
		}
	} else if !p.ownGW && ctx.IsGet() && bytes.Equal(path, pathModels) {
		// With a config file, the routes are the models.
		tl.Mark(stages.GatewayDone)
		x.scratch = snap.AppendModels(x.scratch[:0])
		x.respondJSON(ctx, fasthttp.StatusOK, x.scratch)
		x.finish()
		return
	}
	tl.Mark(stages.GatewayDone)
	x.dl = deadlines{ttft: dl.FirstToken, total: dl.Total, idle: p.cfg.IdleTimeout}
	x.armDeadlines(x.dl)

	client, ok := x.admit(ctx, snap, route, nil)
	if !ok {
		return
	}
	x.chooseReader(path, client, completion, ctx.PostBody())
	stripAuth := snap.Config().Auth == gateway.AuthKeys
	x.buildUpstreamRequest(ctx, client, stripAuth)
	err := client.roundTrip(&x.req, &x.resp, &x.ctl, tl, &x.body)
	if connectFailed(err) && x.ctl.aborted() == nil && gateway.CanRetry(gateway.FailConnect, 1) {
		// Nothing reached the engine: one more try, on another upstream.
		failed := x.up
		p.gw.Done(failed, false)
		x.up = nil
		x.releaseSlot()
		if client, ok = x.admit(ctx, snap, route, failed); ok {
			x.chooseReader(path, client, completion, ctx.PostBody()) // it may run another engine
			x.buildUpstreamRequest(ctx, client, stripAuth)
			err = client.roundTrip(&x.req, &x.resp, &x.ctl, tl, &x.body)
		} else if x.done {
			return // the retry itself was answered (a full queue, the client gone)
		} // else no other upstream: answer with the first failure
	}
	if err != nil {
		x.failBeforeResponse(ctx, err)
		return
	}
	tl.Mark(stages.UpstreamHeaders)
	if engines.ParseServerTiming(x.resp.Header.Peek("Server-Timing"), tl) > 0 {
		x.rec.EngineSource = "server-timing"
	}
	// The protocol's name wins over the reader's (the reference engine's
	// reader reads the same Server-Timing).
	if x.rd.Header(x.peek, tl) && x.rec.EngineSource == "" {
		x.rec.EngineSource = x.rd.Kind()
	}
	status := x.resp.StatusCode()
	x.facts.Status = status
	x.rec.Buffering |= shapeBuffering(&x.resp.Header, x.rec.Streaming)
	if ct := x.resp.Header.ContentType(); status < 300 && (isEventStream(ct) || isNDJSON(ct)) {
		x.ndjson = isNDJSON(ct)
		x.startStream(ctx, status)
		return
	}
	x.relayWhole(ctx, status)
}

// admit picks an upstream for route (not except) and waits for a slot in
// its admission queue: the route and queue stages. It answers the request
// itself when that fails, except when a retry (except != nil) finds no
// other upstream: then it returns false with nothing sent.
func (x *exchange) admit(ctx *fasthttp.RequestCtx, snap *gateway.Snapshot, route *gateway.Route, except *gateway.Upstream) (*Upstream, bool) {
	tl := &x.rec.Timeline
	up, rej := snap.Pick(route, except)
	if rej != nil {
		if except == nil {
			x.rejectGateway(ctx, rej)
		}
		return nil, false
	}
	client, err := x.p.client(up)
	if err != nil {
		x.rejectGateway(ctx, &gateway.Rejection{Status: fasthttp.StatusBadGateway, Type: "upstream_error",
			Message: err.Error(), Reason: endreason.WorkerFailure, Detail: endreason.DetailConnectFailed})
		return nil, false
	}
	x.up, x.rec.Upstream = up, client.Name
	if w, r := client.load.waiting.Load(), client.load.running.Load(); w >= 0 && r >= 0 {
		x.rec.EngineLoad, x.rec.EngineWaiting, x.rec.EngineRunning = true, w, r
	}
	tl.Mark(stages.Routed)
	release, rej := up.Acquire(x.ctl.aborts())
	if rej != nil {
		if cause := x.ctl.aborted(); cause != nil {
			x.failAborted(ctx, cause) // the client left, or a deadline fired, while queued
		} else {
			x.rejectGateway(ctx, rej)
		}
		return nil, false
	}
	x.release = release
	tl.Mark(stages.Admitted)
	return client, true
}

// chooseReader picks how the upstream's signals are read, and asks vLLM for
// its usage chunk (which carries its timing) when the client did not.
func (x *exchange) chooseReader(path []byte, u *Upstream, completion bool, body []byte) {
	kind := readerKind(path, u)
	x.rd = x.reader(kind)
	x.sendBody, x.dropUsage = x.sendBody[:0], false
	if kind == engines.KindVLLM && completion && x.rec.Streaming && !x.includeUsage {
		body, added, err := engines.EnsureIncludeUsage(body, x.sendBody[:0])
		if err == nil && added {
			x.sendBody, x.dropUsage = body, true
		}
	}
}

// releaseSlot gives the admission slot back early (before a retry).
func (x *exchange) releaseSlot() {
	if x.release != nil {
		x.release()
		x.release = nil
	}
}

func connectFailed(err error) bool {
	var xe *exchangeError
	return errors.As(err, &xe) && xe.connect
}

var pathModels = []byte("/v1/models")

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

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1), plus ones the proxy sets itself.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// buildUpstreamRequest copies the client's request for the upstream, with
// the trace and request-id headers and without hop-by-hop headers (nor the
// client's key, when the gateway checked it: the key is ours, not the
// engine's).
func (x *exchange) buildUpstreamRequest(ctx *fasthttp.RequestCtx, up *Upstream, stripAuth bool) {
	req := &x.req
	ctx.Request.Header.CopyTo(&req.Header)
	for _, k := range connectionTokens(&ctx.Request.Header) {
		req.Header.DelBytes(k)
	}
	for _, h := range hopByHop {
		req.Header.Del(h)
	}
	if stripAuth {
		req.Header.Del("Authorization")
	}
	req.Header.ResetConnectionClose()
	req.SetRequestURIBytes(ctx.Request.Header.RequestURI())
	req.URI().SetScheme("http")
	if up.hc.IsTLS {
		req.URI().SetScheme("https")
	}
	req.URI().SetHost(up.Addr)
	req.Header.SetHost(up.Addr)
	if len(x.sendBody) > 0 {
		req.SetBodyRaw(x.sendBody)
	} else {
		req.SetBodyRaw(ctx.Request.Body())
	}
	// The relay parses events: ask for them uncompressed.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("X-Request-Id", x.rec.RequestID)
	x.scratch = x.tc.appendTraceparent(x.scratch[:0])
	req.Header.SetBytesV("traceparent", x.scratch)
}

// connectionTokens returns the header names listed in Connection, which are
// hop-by-hop too.
func connectionTokens(h *fasthttp.RequestHeader) [][]byte {
	v := h.Peek("Connection")
	if len(v) == 0 {
		return nil
	}
	var out [][]byte
	for _, t := range bytes.Split(v, []byte(",")) {
		if t = bytes.TrimSpace(t); len(t) > 0 {
			out = append(out, t)
		}
	}
	return out
}

func isEventStream(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	return bytes.EqualFold(bytes.TrimSpace(mt), []byte("text/event-stream"))
}

// startStream waits for the first event, then hands the response to fasthttp
// as a stream. Until the first event nothing has been sent, so a failure
// still gets a proper error response.
func (x *exchange) startStream(ctx *fasthttp.RequestCtx, status int) {
	x.facts.Stream = true
	var src io.Reader = &x.body
	if x.rec.Buffering&record.BufferedCompressed != 0 {
		if !x.dec.reset(&x.body, x.resp.Header.ContentEncoding()) {
			x.facts.BadContentType = true
			x.failBeforeFirstEvent(ctx, fmt.Errorf("%w: %q", errUnsupportedEncoding, x.resp.Header.ContentEncoding()))
			return
		}
		src = &x.dec
	}
	if x.ndjson {
		x.lines.Reset(src)
	} else {
		x.scan.Reset(src)
	}
	if err := x.nextEvent(); err != nil {
		x.failBeforeFirstEvent(ctx, err)
		return
	}
	x.copyResponseHeaders(ctx)
	if src == &x.dec {
		ctx.Response.Header.Del("Content-Encoding") // the client gets the decoded events
	}
	if x.breakdown {
		_ = ctx.Response.Header.SetTrailer("Server-Timing")
		x.respHeader = &ctx.Response.Header
	}
	if x.enc = acquireEncoder(x.p.cfg.CompressStreams, ctx.Request.Header.Peek("Accept-Encoding")); x.enc != nil {
		ctx.Response.Header.Set("Content-Encoding", x.enc.name)
		ctx.Response.Header.Add("Vary", "Accept-Encoding")
		x.out = x.enc.encode(x.out) // the first event, read before the response started
	}
	ctx.SetStatusCode(status)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	x.rec.Status = status
	x.streaming = true
	ctx.SetBodyStream(x, -1) // fasthttp now owns x until CloseWithError
}

// relayWhole forwards a response that is not an event stream: an upstream
// error, a non-streamed completion, or any other path.
func (x *exchange) relayWhole(ctx *fasthttp.RequestCtx, status int) {
	tl := &x.rec.Timeline
	body, err := x.readWhole()
	if err != nil {
		x.failBeforeFirstEvent(ctx, err)
		return
	}
	ct := x.resp.Header.ContentType()
	isJSON := bytes.Contains(ct, []byte("json"))
	if status >= 400 {
		x.rec.Error = "upstream answered " + strconv.Itoa(status) + ": " + string(truncate(body, 512))
	}
	switch {
	case status >= 400 && !isJSON:
		// Keep the status, give the client the error shape it expects.
		x.respondError(ctx, status, "upstream_error", x.rec.Error)
		x.finish()
		return
	case x.rec.Streaming && status < 300 && !isJSON:
		x.facts.BadContentType = true
		x.rec.Error = "upstream answered a stream request with content type " + string(ct)
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", x.rec.Error)
		x.finish()
		return
	}
	if status < 300 && isJSON {
		s := x.rd.Event(body, tl)
		x.observe(s, tl.Now())
		if s.Content {
			tl.Mark(stages.FirstTokenFlushed) // written with the whole body
		}
	}
	x.copyResponseHeaders(ctx)
	if x.breakdown {
		if bd := x.rec.Breakdown(); bd.OK {
			var v [256]byte // not x.scratch: body aliases it
			ctx.Response.Header.SetBytesV("Server-Timing", appendServerTiming(v[:0], &bd))
		}
	}
	ctx.SetStatusCode(status)
	ctx.SetBody(body)
	x.rec.Status = status
	x.rec.BytesOut = int64(len(body))
	x.finish()
}

// readWhole reads a non-streamed upstream body, bounded by MaxBodyBytes.
// The result aliases x.scratch.
func (x *exchange) readWhole() ([]byte, error) {
	limit := x.p.cfg.MaxBodyBytes
	buf := x.scratch[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := x.body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		x.scratch = buf
		if len(buf) > limit {
			x.facts.Read = endreason.ReadTooLarge
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if cause := x.ctl.aborted(); cause != nil {
				return nil, cause
			}
			x.facts.Read = readEnd(err)
			return nil, err
		}
	}
}

var errBodyTooLarge = errors.New("upstream response body larger than the limit")

// copyResponseHeaders copies the upstream's end-to-end headers to the client.
func (x *exchange) copyResponseHeaders(ctx *fasthttp.RequestCtx) {
	dst := &ctx.Response.Header
	for k, v := range x.resp.Header.All() {
		switch {
		case skipResponseHeader(k):
		case !x.p.cfg.PassEngineTiming && bytes.EqualFold(k, []byte("Server-Timing")):
		default:
			dst.AddBytesKV(k, v)
		}
	}
	dst.SetContentTypeBytes(x.resp.Header.ContentType())
	dst.Set("X-Request-Id", x.rec.RequestID)
}

func skipResponseHeader(k []byte) bool {
	for _, h := range hopByHop {
		if bytes.EqualFold(k, []byte(h)) {
			return true
		}
	}
	return bytes.EqualFold(k, []byte("Content-Length")) || bytes.EqualFold(k, []byte("Content-Type")) ||
		bytes.EqualFold(k, []byte("Date")) || bytes.EqualFold(k, []byte("Server"))
}

// failBeforeResponse handles an upstream exchange that produced no response.
func (x *exchange) failBeforeResponse(ctx *fasthttp.RequestCtx, err error) {
	var xe *exchangeError
	switch {
	case x.ctl.aborted() != nil:
		x.failAborted(ctx, x.ctl.aborted())
		return
	case errors.As(err, &xe) && xe.connect:
		x.facts.ConnectFailed = true
		x.rec.Error = "upstream " + x.rec.Upstream + " unreachable: " + err.Error()
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_unreachable", x.rec.Error)
	default:
		x.facts.ClosedBeforeResponse = true
		x.rec.Error = "upstream " + x.rec.Upstream + " closed the connection before responding: " + err.Error()
		x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", x.rec.Error)
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
	if x.rec.Error == "" {
		x.rec.Error = err.Error()
	}
	x.respondError(ctx, fasthttp.StatusBadGateway, "upstream_error", x.rec.Error)
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
		x.rec.Status = 499
	}
	x.finish()
}

// rejectGateway answers a request the gateway refused, with the
// rejection's status, Retry-After and OpenAI-style body.
func (x *exchange) rejectGateway(ctx *fasthttp.RequestCtx, rej *gateway.Rejection) {
	x.facts.Rejected, x.facts.RejectedDetail = rej.Reason, rej.Detail
	x.rec.Error = rej.Message
	x.scratch = rej.AppendJSON(x.scratch[:0])
	x.respondJSON(ctx, rej.Status, x.scratch)
	if rej.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(rej.RetryAfter))
	}
	x.finish()
}

// respondJSON writes a whole JSON response.
func (x *exchange) respondJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("X-Request-Id", x.rec.RequestID)
	ctx.SetBody(body)
	x.rec.Status = status
	x.rec.BytesOut = int64(len(body))
}

// respondError writes an OpenAI-style error body.
func (x *exchange) respondError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	body, _ := json.Marshal(openAIError{Error: openAIErrorBody{Message: msg, Type: typ, Code: string(x.detailGuess())}})
	x.respondJSON(ctx, status, body)
}

// detailGuess gives the error body a machine-readable code: the end detail
// the record will carry.
func (x *exchange) detailGuess() endreason.Detail {
	f := x.facts
	if c := x.ctl.aborted(); c != nil {
		var de *deadlineError
		if errors.As(c, &de) {
			f.Deadline = de.detail
		}
	}
	_, d := endreason.Classify(f)
	return d
}

type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
