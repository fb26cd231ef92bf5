package refengine

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ttftlens/ttftlens/refengine/model"
	"github.com/ttftlens/ttftlens/sse"
)

// maxBodyBytes bounds a request body (data: URLs make chat bodies large).
const maxBodyBytes = 64 << 20

// gen is the state of one generation request inside its handler.
type gen struct {
	s       *Server
	w       http.ResponseWriter
	rc      *http.ResponseController
	hr      *http.Request
	arrived time.Time // the request's first bytes read (arrivedAt)
	unread  bool      // truth.Unread is known
	truth   Truth
	f       Faults
	a       *apiRequest
	req     *request
	id      string // response id: chatcmpl-<request id> or cmpl-<request id>
	created int64

	// Output state.
	headersSent bool
	prefillSent bool // the prefill progress comment went out (PROTOCOL.md)
	roleSent    bool
	commentSent bool
	contentSent bool
	timing      string // the Server-Timing value sent with the first token
	hold        []byte // buffered fault: every event held until the end
	buf         []byte // an event's data
	out         []byte // the bytes of a write
	queued      []byte // what goes out first with the next write
	writeErr    error
	st          schedTruth
	haveST      bool
	n           int    // generated tokens consumed
	prev        int    // previous token id, for Decode
	pending     string // decoded text not yet sent (stop-string holdback)
	text        strings.Builder
	maxStop     int
	finishedBy  string // finish reason given by the scheduler, if any
}

// requestID returns the incoming X-Request-Id if it is 1..128 visible ASCII
// characters, else a fresh random id.
func requestID(in string) string {
	if n := len(in); n > 0 && n <= 128 {
		ok := true
		for i := 0; i < n; i++ {
			if in[i] < 0x21 || in[i] > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return in
		}
	}
	var b [16]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

func (s *Server) generate(w http.ResponseWriter, hr *http.Request, chat bool) {
	g := &gen{s: s, w: w, hr: hr, rc: http.NewResponseController(w), arrived: arrivedAt(hr), created: time.Now().Unix(), f: noFaults()}
	id := requestID(hr.Header.Get("X-Request-Id"))
	w.Header().Set("X-Request-Id", id)
	g.truth = Truth{RequestID: id, Traceparent: hr.Header.Get("traceparent"), Received: g.arrived, Endpoint: "completions"}
	g.truth.Unread, g.unread = unreadFor(hr)
	g.id = "cmpl-" + id
	if chat {
		g.truth.Endpoint = "chat"
		g.id = "chatcmpl-" + id
	}
	defer g.finalize()
	g.run(chat)
}

// fail sends an error response if no header has gone out yet.
func (g *gen) fail(e *apiError, finish, detail string) {
	g.truth.FinishReason, g.truth.Detail = finish, detail
	if g.headersSent {
		return
	}
	g.headersSent = true
	g.truth.Status = e.status
	writeError(g.w, e)
}

func (g *gen) run(chat bool) {
	s := g.s
	body, err := io.ReadAll(http.MaxBytesReader(g.w, g.hr.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			g.fail(&apiError{status: http.StatusRequestEntityTooLarge, msg: "request body too large", typ: "invalid_request_error"}, "", "invalid_request")
			return
		}
		g.truth.FinishReason, g.truth.Detail = finishAbort, "client_cancel"
		return
	}
	a, aerr := decodeRequest(body, chat)
	if aerr != nil {
		g.fail(aerr, "", "invalid_request")
		return
	}
	g.a = a
	g.truth.Stream = a.stream
	if a.model != "" && a.model != s.cfg.ModelName {
		g.fail(&apiError{status: http.StatusNotFound, msg: fmt.Sprintf("The model `%s` does not exist.", a.model), typ: "invalid_request_error", param: "model", code: "model_not_found"}, "", "invalid_request")
		return
	}
	g.f = *s.faults.Load()
	if h := g.hr.Header.Get(FaultHeader); h != "" && s.cfg.AllowFaults {
		if err := g.f.apply(h); err != nil {
			g.fail(badRequest(FaultHeader, "%v", err), "", "invalid_request")
			return
		}
	}
	g.truth.Faults = g.f.String()
	if g.f.HTTPError != 0 {
		g.fail(&apiError{status: g.f.HTTPError, msg: "injected fault: http_error", typ: "server_error"}, finishError, "http_error")
		return
	}
	ctx := g.hr.Context()

	// Media stage, then the tokenizer stage, back to back.
	mstart := time.Now()
	g.truth.Recv = mstart.Sub(g.arrived)
	err = g.fetchMedia(ctx)
	tstart := time.Now()
	g.truth.Media = tstart.Sub(mstart)
	if err != nil {
		g.stageErr(err)
		return
	}
	prompt, err := g.tokenize(ctx)
	tend := time.Now()
	g.truth.Tokenize = tend.Sub(tstart)
	if err != nil {
		g.stageErr(err)
		return
	}
	g.truth.PromptTokens = len(prompt)
	maxSeq := s.m.Cfg.MaxSeq
	if len(prompt) >= maxSeq {
		g.fail(badRequest("messages", "This model's maximum context length is %d tokens. However, your prompt has %d tokens.", maxSeq, len(prompt)), "", "invalid_request")
		return
	}
	maxTokens := a.maxTokens
	if maxTokens == 0 {
		maxTokens = min(s.cfg.DefaultMaxTokens, maxSeq-len(prompt))
	} else if len(prompt)+maxTokens > maxSeq {
		g.fail(badRequest("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion).", maxSeq, len(prompt)+maxTokens, len(prompt), maxTokens), "", "invalid_request")
		return
	}
	if blocks := (len(prompt) + maxTokens + model.BlockSize - 1) / model.BlockSize; blocks > s.pool.Total() {
		g.fail(badRequest("max_tokens", "request needs %d KV blocks, the cache has %d", blocks, s.pool.Total()), "", "invalid_request")
		return
	}
	for _, st := range a.stop {
		g.maxStop = max(g.maxStop, len(st))
	}

	req := newRequest()
	req.id = g.truth.RequestID
	req.prompt = prompt
	req.tokens = append(make([]int, 0, len(prompt)+maxTokens), prompt...)
	req.maxTokens = maxTokens
	req.temperature = a.temperature
	req.topP = a.topP
	req.ignoreEOS = a.ignoreEOS
	seed := rand.Uint64()
	if a.seed != nil {
		seed = uint64(*a.seed)
	}
	req.rng = rand.New(rand.NewPCG(seed, 0x7474_666c_656e73))
	req.faults = g.f
	g.req = req
	g.prev = prompt[len(prompt)-1]

	keep := g.f.ignoresDisconnect()
	stopWatch := context.AfterFunc(ctx, func() {
		req.gone.Store(true)
		if !keep {
			req.ctl.CompareAndSwap(ctlNone, ctlAbort)
			s.sched.poke()
		}
	})
	defer stopWatch()
	defer func() {
		// However the handler ends, the scheduler drops the request.
		req.ctl.CompareAndSwap(ctlNone, ctlDrop)
		s.sched.poke()
	}()
	req.submitted = time.Now()
	g.truth.Recv += req.submitted.Sub(tend) // the checks and the request built after the stages
	req.notBefore = req.submitted.Add(g.f.QueueDelay)
	s.sched.submit(req)

	if a.stream && !g.f.HoldHeaders {
		g.sendHeaders()
		if s.inBand() {
			g.write(phaseQueued) // flushed with the headers (held under buffered)
		}
		g.flush()
	}
	g.consume(ctx)
}

// stageErr ends the request after a media or tokenizer failure.
func (g *gen) stageErr(err error) {
	var me *mediaError
	switch {
	case errors.As(err, &me):
		param := "prompt"
		if g.a.chat {
			param = "messages"
		}
		g.fail(badRequest(param, "%s", me.msg), "", "invalid_request")
	case errors.Is(err, errClosed):
		g.fail(&apiError{status: http.StatusServiceUnavailable, msg: "engine is shutting down", typ: "server_error"}, finishError, "engine_closed")
	default: // the client left
		g.truth.FinishReason, g.truth.Detail, g.truth.ClientGone = finishAbort, "client_cancel", true
		g.s.met.aborted.Add(1)
	}
}

// sleep waits d, or until the client leaves (unless ignored) or the
// server closes. It reports whether the full time passed.
func (g *gen) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	done := ctx.Done()
	if g.f.ignoresDisconnect() {
		done = nil
	}
	select {
	case <-t.C:
		return nil
	case <-done:
		return ctx.Err()
	case <-g.s.closing:
		return errClosed
	}
}

func (g *gen) fetchMedia(ctx context.Context) error {
	if err := g.sleep(ctx, g.f.SlowMedia); err != nil {
		return err
	}
	for i := range g.a.messages {
		for j := range g.a.messages[i].parts {
			p := &g.a.messages[i].parts[j]
			if p.imageURL == "" {
				continue
			}
			b, err := g.s.media.fetch(ctx, p.imageURL)
			if err != nil {
				return err
			}
			p.image = b
		}
	}
	return nil
}

// tokenize builds the prompt: BOS, the long_prompt filler, then the
// rendered chat (or the completion prompt), with image placeholders.
func (g *gen) tokenize(ctx context.Context) ([]int, error) {
	s := g.s
	vocab := s.tok.Vocab()
	var parts []promptPart
	if g.a.chat {
		parts = renderChat(g.a.messages)
	} else if g.a.promptIDs == nil {
		parts = []promptPart{{text: g.a.prompt}}
	}
	var prompt []int
	if g.a.promptIDs != nil {
		for _, id := range g.a.promptIDs {
			if id < 0 || id >= vocab {
				return nil, &mediaError{fmt.Sprintf("token id %d in prompt is outside the vocabulary [0, %d)", id, vocab)}
			}
		}
	} else {
		prompt = append(prompt, s.tok.BOS())
	}
	if n := g.f.LongPrompt; n > 0 {
		// Random filler so that padded prompts never hit the prefix cache.
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for range n {
			prompt = append(prompt, r.IntN(vocab))
		}
	}
	extra := g.f.SlowTokenizer
	ran := false
	for _, p := range parts {
		if p.image != nil {
			prompt = append(prompt, imageTokens(p.image, s.cfg.ImageTokens, vocab)...)
			continue
		}
		ids, err := s.toks.encode(ctx, p.text, extra)
		if err != nil {
			return nil, err
		}
		extra, ran = 0, true
		prompt = append(prompt, ids...)
	}
	if !ran && extra > 0 {
		// Token prompts still pass through the (slow) tokenizer stage.
		if _, err := s.toks.encode(ctx, "", extra); err != nil {
			return nil, err
		}
	}
	prompt = append(prompt, g.a.promptIDs...)
	if len(prompt) == 0 {
		prompt = append(prompt, s.tok.BOS())
	}
	return prompt, nil
}

// consume relays the scheduler's tokens to the client until the request
// ends.
func (g *gen) consume(ctx context.Context) {
	req := g.req
	done := ctx.Done()
	var toks []int
	if g.afterToken(ctx) {
		return
	}
	for {
		req.mu.Lock()
		toks = append(toks[:0], req.out...)
		req.out = req.out[:0]
		fin, reason, errMsg, scheduled := req.finished, req.finish, req.errMsg, req.scheduled
		if req.firstTok && !g.haveST {
			g.st, g.haveST = req.truth, true
		}
		if fin {
			g.st = req.truth
		}
		req.mu.Unlock()

		if scheduled && !g.prefillSent && g.a.stream && !g.f.HoldHeaders && g.s.inBand() {
			g.prefillSent = true
			g.queued = append(g.queued, phasePrefill...) // with the first token when it is here too
			if len(toks) == 0 {
				g.write(nil)
			}
		}
		for _, t := range toks {
			g.n++
			g.pending += g.s.tok.Decode(g.prev, t)
			g.prev = t
			if i, ok := g.findStop(); ok {
				g.pending = g.pending[:i]
				g.emitPending(true)
				g.finish(finishStop)
				return
			}
			g.emitPending(false)
			if g.lost() || g.afterToken(ctx) {
				return
			}
		}
		if len(g.queued) > 0 {
			g.write(nil) // the first token's text is held back (a stop string may start)
		}
		if fin {
			switch reason {
			case finishAbort:
				g.abort()
			case finishError:
				g.errorEnd(errMsg, "engine_error")
			default:
				g.finishedBy = reason
				g.emitPending(true)
				g.finish(reason)
			}
			return
		}
		if g.lost() {
			return
		}
		select {
		case <-req.notify:
		case <-done:
			if !g.f.ignoresDisconnect() {
				g.abort()
				return
			}
			g.truth.ClientGone = true
			done = nil
		}
	}
}

// lost reports (and handles) a client that went away during a write.
func (g *gen) lost() bool {
	if g.writeErr == nil || g.f.ignoresDisconnect() {
		return false
	}
	g.req.gone.Store(true)
	g.req.ctl.CompareAndSwap(ctlNone, ctlAbort)
	g.s.sched.poke()
	g.abort()
	return true
}

// abort ends a request whose client left.
func (g *gen) abort() {
	g.truth.FinishReason, g.truth.Detail, g.truth.ClientGone = finishAbort, "client_cancel", true
	g.s.met.aborted.Add(1)
}

// findStop returns the index in pending where the first stop string starts.
func (g *gen) findStop() (int, bool) {
	best := -1
	for _, st := range g.a.stop {
		if i := strings.Index(g.pending, st); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// emitPending sends the decoded text that can no longer be the start of a
// stop string (all of it if final).
func (g *gen) emitPending(final bool) {
	cut := len(g.pending)
	if !final {
		if g.maxStop > 1 {
			cut -= g.maxStop - 1
			for cut > 0 && cut < len(g.pending) && !utf8.RuneStart(g.pending[cut]) {
				cut--
			}
		}
		// Byte-fallback tokens can end in the middle of a UTF-8 sequence:
		// hold the incomplete tail until the next pieces complete it.
		for i := cut - 1; i >= 0 && i >= cut-utf8.UTFMax; i-- {
			if utf8.RuneStart(g.pending[i]) {
				if !utf8.FullRuneInString(g.pending[i:cut]) {
					cut = i
				}
				break
			}
		}
	}
	if cut <= 0 {
		return
	}
	piece := g.pending[:cut]
	g.pending = g.pending[cut:]
	if !g.a.stream {
		g.text.WriteString(piece)
		return
	}
	g.buf = g.appendChunkStart(g.buf[:0])
	if g.a.chat {
		g.buf = append(g.buf, `"delta":{"content":`...)
		g.buf = appendJSONString(g.buf, piece)
		g.buf = append(g.buf, `},"logprobs":null,"finish_reason":null}]}`...)
	} else {
		g.buf = append(g.buf, `"text":`...)
		g.buf = appendJSONString(g.buf, piece)
		g.buf = append(g.buf, `,"logprobs":null,"finish_reason":null}]}`...)
	}
	g.out = sse.AppendEvent(g.begin(g.out[:0]), nil, g.buf)
	g.write(g.out)
	if !g.contentSent {
		g.contentSent = true
		if !g.f.Buffered {
			g.truth.TTFT = time.Since(g.arrived)
		}
	}
}

// afterToken applies the faults keyed to the n-th generated token. It
// reports whether the response has ended.
func (g *gen) afterToken(ctx context.Context) bool {
	f, n := &g.f, g.n
	switch {
	case f.ContentFilter == n:
		g.emitPending(true)
		g.finish(finishContentFilter)
		return true
	case f.ErrorAfter == n:
		g.emitPending(true)
		g.errorEnd("injected fault: error_after", "error_event")
		return true
	case f.CloseAfter == n:
		g.emitPending(true)
		g.closeEarly()
		return true
	case f.ResetAfter == n:
		g.reset()
		return true
	case f.StallAfter == n:
		if g.sleep(ctx, f.StallFor) != nil {
			g.abort()
			return true
		}
	}
	return false
}

// appendChunkHead appends the fields every stream chunk starts with: id,
// object, created, model.
func (g *gen) appendChunkHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, g.id)
	if g.a.chat {
		b = append(b, `,"object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"model":`...)
	return appendJSONString(b, g.s.cfg.ModelName)
}

// appendChunkStart appends the common head of a stream chunk up to the
// opening of its only choice.
func (g *gen) appendChunkStart(b []byte) []byte {
	return append(g.appendChunkHead(b), `,"choices":[{"index":0,`...)
}

func (g *gen) appendUsage(b []byte) []byte {
	completion := g.n
	if g.finishedBy == finishStop && g.st.Generated > completion {
		completion = g.st.Generated // the end-of-sequence token counts, as in vLLM
	}
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = appendInt(b, g.truth.PromptTokens)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, g.truth.PromptTokens+completion)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, completion)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, g.st.CachedTokens)
	return append(b, "}}"...)
}

// begin appends to b what precedes the first content event of a stream:
// the role-only chunk (chat) and the Server-Timing comment. The caller
// writes them with that event, in one write: the comment is rendered last,
// so that emit runs up to that write.
func (g *gen) begin(b []byte) []byte {
	if !g.a.stream {
		return b
	}
	if g.a.chat && !g.roleSent {
		g.roleSent = true
		role := g.appendChunkStart(nil)
		role = append(role, `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
		b = sse.AppendEvent(b, nil, role)
	}
	if !g.commentSent && g.haveST {
		g.commentSent = true
		g.truth.Emit = time.Since(g.st.FirstTokenAt)
		if g.s.inBand() {
			g.timing = g.serverTiming(true)
			b = sse.AppendComment(b, []byte("server-timing "+g.timing))
		}
	}
	return b
}

// serverTiming renders the Server-Timing value (PROTOCOL.md). Before the
// first token only the handler's own stages are known; emit only with the
// first token of a stream.
func (g *gen) serverTiming(emit bool) string {
	var b []byte
	m := func(name string, d time.Duration) {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
		b = append(b, ";dur="...)
		b = strconv.AppendFloat(b, float64(d.Nanoseconds()/1000)/1000, 'f', -1, 64)
	}
	if g.haveST {
		m("queue", g.st.Queue)
	}
	m("tokenize", g.truth.Tokenize)
	m("media", g.truth.Media)
	if g.haveST {
		m("prefill", g.st.Prefill)
		m("sync", g.st.Sync)
		m("decode1", g.st.FirstDecode)
	}
	m("recv", g.truth.Recv)
	if g.unread {
		m("unread", g.truth.Unread)
	}
	if emit {
		m("emit", g.truth.Emit)
	}
	return string(b)
}

// event writes one SSE data event.
func (g *gen) event(data []byte) {
	g.write(sse.AppendEvent(nil, nil, data))
}

// Progress comments (PROTOCOL.md, "Progress").
var (
	phaseQueued  = []byte(": ttftlens-phase queued\n\n")
	phasePrefill = []byte(": ttftlens-phase prefill\n\n")
)

// sendHeaders writes the stream's response headers (not flushed).
func (g *gen) sendHeaders() {
	if g.headersSent {
		return
	}
	g.headersSent = true
	h := g.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	switch {
	case g.timing != "":
		// hold_headers: the headers go out with the first token, and the
		// values with them are the comment's.
		h.Set("Server-Timing", g.timing)
	case g.haveST && g.s.inBand():
		h.Set("Server-Timing", g.serverTiming(false))
	}
	g.truth.Status = http.StatusOK
	g.w.WriteHeader(http.StatusOK)
}

// write sends what was queued and b on the stream, in one write, and
// flushes it, or holds it (buffered fault).
func (g *gen) write(b []byte) {
	if len(g.queued) > 0 {
		b = append(g.queued, b...)
		g.queued = nil
	}
	if g.f.Buffered {
		g.hold = append(g.hold, b...)
		return
	}
	g.sendHeaders()
	if g.writeErr != nil {
		return
	}
	if _, err := g.w.Write(b); err != nil {
		g.writeErr = err
		return
	}
	g.flush()
}

func (g *gen) flush() {
	if g.writeErr == nil {
		if err := g.rc.Flush(); err != nil {
			g.writeErr = err
		}
	}
}

// releaseHold sends what the buffered fault held back, all at once.
func (g *gen) releaseHold() {
	if len(g.hold) == 0 {
		return
	}
	b := g.hold
	g.hold = nil
	g.f.Buffered = false
	g.write(b)
	if g.contentSent && g.writeErr == nil {
		g.truth.TTFT = time.Since(g.arrived)
	}
}

// finish ends the response normally with a finish reason.
func (g *gen) finish(reason string) {
	g.truth.FinishReason = reason
	g.truth.CompletionTokens = g.n
	if !g.a.stream {
		g.writeNonStream(reason)
		return
	}
	b := g.appendChunkStart(nil)
	if g.a.chat {
		b = append(b, `"delta":{},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `"text":"","logprobs":null,"finish_reason":`...)
	}
	b = appendJSONString(b, reason)
	b = append(b, `,"stop_reason":null}]}`...)
	g.write(sse.AppendEvent(g.begin(g.out[:0]), nil, b))
	if g.a.includeUsage {
		b = append(g.appendChunkHead(b[:0]), `,"choices":[],`...)
		b = g.appendUsage(b)
		b = append(b, '}')
		g.event(b)
	}
	g.event([]byte("[DONE]"))
	g.releaseHold()
}

// writeNonStream sends the whole response with a Server-Timing trailer.
func (g *gen) writeNonStream(reason string) {
	b := append([]byte(nil), `{"id":`...)
	b = appendJSONString(b, g.id)
	if g.a.chat {
		b = append(b, `,"object":"chat.completion","created":`...)
	} else {
		b = append(b, `,"object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, g.s.cfg.ModelName)
	b = append(b, `,"choices":[{"index":0,`...)
	if g.a.chat {
		b = append(b, `"message":{"role":"assistant","content":`...)
		b = appendJSONString(b, g.text.String())
		b = append(b, `},`...)
	} else {
		b = append(b, `"text":`...)
		b = appendJSONString(b, g.text.String())
		b = append(b, ',')
	}
	b = append(b, `"logprobs":null,"finish_reason":`...)
	b = appendJSONString(b, reason)
	b = append(b, `,"stop_reason":null}],`...)
	b = g.appendUsage(b)
	b = append(b, "}\n"...)
	g.writeNonStreamBody(b)
}

func (g *gen) writeNonStreamBody(b []byte) {
	h := g.w.Header()
	h.Set("Content-Type", "application/json")
	if g.s.inBand() {
		h.Set("Trailer", "Server-Timing")
	}
	g.headersSent = true
	g.truth.Status = http.StatusOK
	g.w.WriteHeader(http.StatusOK)
	if _, err := g.w.Write(b); err != nil {
		g.writeErr = err
	}
	g.truth.TTFT = time.Since(g.arrived)
	if g.s.inBand() {
		h.Set("Server-Timing", g.serverTiming(false))
	}
}

// errorEnd ends the request with an error: an error event on a stream whose
// headers are out (then the body ends, without [DONE]), or a 500.
func (g *gen) errorEnd(msg, detail string) {
	e := &apiError{status: http.StatusInternalServerError, msg: msg, typ: "server_error", code: "500"}
	if !g.a.stream || !g.headersSent {
		g.fail(e, finishError, detail)
		return
	}
	g.truth.FinishReason, g.truth.Detail = finishError, detail
	g.truth.CompletionTokens = g.n
	g.event(e.appendJSON(nil))
	g.releaseHold()
}

// closeEarly ends the body cleanly without a finish chunk or [DONE].
func (g *gen) closeEarly() {
	g.truth.FinishReason, g.truth.Detail = finishError, "close_without_done"
	g.truth.CompletionTokens = g.n
	if !g.a.stream {
		// Headers and half a JSON body, then a clean end of the body.
		g.writeNonStreamBody([]byte(`{"id":"` + g.id + `","object":`))
		return
	}
	g.sendHeaders()
	g.releaseHold()
	g.flush()
}

// reset closes the TCP connection with an RST (SO_LINGER 0).
func (g *gen) reset() {
	g.truth.FinishReason, g.truth.Detail = finishError, "reset_mid_stream"
	g.truth.CompletionTokens = g.n
	if g.truth.Status == 0 && g.headersSent {
		g.truth.Status = http.StatusOK
	}
	g.flush()
	conn, _, err := g.rc.Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the stream instead.
		panic(http.ErrAbortHandler)
	}
	if ac, ok := conn.(*arrivalConn); ok {
		conn = ac.Conn
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
	g.writeErr = net.ErrClosed
}

// finalize records the request's truth, metrics and log line.
func (g *gen) finalize() {
	s := g.s
	t := &g.truth
	t.E2E = time.Since(g.arrived)
	if req := g.req; req != nil {
		req.mu.Lock()
		if req.firstTok {
			g.st, g.haveST = req.truth, true
		}
		t.TokensAfterClientLeft = req.afterGone
		if req.gone.Load() {
			t.ClientGone = true
		}
		req.mu.Unlock()
	}
	if g.haveST {
		st := g.st
		t.Queue, t.Prefill, t.Sync, t.FirstDecode = st.Queue, st.Prefill, st.Sync, st.FirstDecode
		t.FirstTokenSampled = st.FirstTokenAt.Sub(g.arrived)
		t.CachedTokens, t.Preemptions = st.CachedTokens, st.Preemptions
		s.met.ttft.Observe(t.FirstTokenSampled.Seconds())
		s.met.queue.Observe(st.Queue.Seconds())
		s.met.prefill.Observe((st.Prefill + st.FirstDecode).Seconds())
		last := st.LastTokenAt
		if last.IsZero() {
			last = time.Now()
		}
		s.met.decode.Observe(last.Sub(st.FirstTokenAt).Seconds())
		s.met.e2e.Observe(last.Sub(g.arrived).Seconds())
	}
	if t.CompletionTokens == 0 {
		t.CompletionTokens = g.n
	}
	if t.FinishReason != "" {
		s.met.finished(t.FinishReason)
	}
	s.truth.put(*t)
	s.exportSpans(t)
	if l := s.cfg.Logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("request_id", t.RequestID),
			slog.String("traceparent", t.Traceparent),
			slog.String("endpoint", t.Endpoint),
			slog.Bool("stream", t.Stream),
			slog.Int("status", t.Status),
			slog.String("finish_reason", t.FinishReason),
			slog.String("detail", t.Detail),
			slog.String("faults", t.Faults),
			slog.Int("prompt_tokens", t.PromptTokens),
			slog.Int("cached_tokens", t.CachedTokens),
			slog.Int("completion_tokens", t.CompletionTokens),
			slog.Duration("queue", t.Queue),
			slog.Duration("tokenize", t.Tokenize),
			slog.Duration("media", t.Media),
			slog.Duration("prefill", t.Prefill),
			slog.Duration("sync", t.Sync),
			slog.Duration("decode1", t.FirstDecode),
			slog.Duration("unread", t.Unread),
			slog.Duration("recv", t.Recv),
			slog.Duration("emit", t.Emit),
			slog.Duration("ttft", t.TTFT),
			slog.Duration("e2e", t.E2E),
		)
	}
}
