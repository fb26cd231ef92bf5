package proxy

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

// relay is the upstream response body on its way to the client: it takes
// each event from its source (src), parses and times it on the request's
// clock, folding what it says into the record (through fin) and the engine
// report (sig), and hands it out (dst). For a streamed response, each
// Write its WriteTo makes is one client write: the events that arrived
// together gathered, or one event (see writeNext). Going on to the next
// means the previous bytes reached the client socket. Only the goroutine
// serving the request touches a relay, except for firstToken and
// lastContent, which the deadline timer reads.
type relay struct {
	relayWiring

	src eventSource // where the events come from
	dst delivery    // where they go: the client

	dropUsage bool  // the usage-only chunk was asked for by us, not the client
	readErr   error // the error that ended the stream on our side, if any
	// firstReads is the upstream read count when the first content event
	// was parsed: unchanged at the second, both came in one read.
	firstReads uint64
	// reasoningUsage: the upstream's usage counted the reasoning tokens,
	// so reasoning events are no longer counted.
	reasoningUsage bool

	// The client asked for its own breakdown (and its key may have it);
	// with trailer, the response declared a Server-Timing trailer, whose
	// value serverTiming is once the breakdown is sent.
	breakdown     bool
	breakdownSent bool
	trailer       bool
	serverTiming  []byte
	scratch       []byte

	// Read by the deadline timer. Only content is activity: comments and
	// events without content (pings) do not hold off the idle deadline.
	firstToken  atomic.Bool
	lastContent atomic.Int64 // offset of the last content event, ns
}

// relayWiring is what a relay reports to, set once per exchange.
type relayWiring struct {
	cfg          *Config
	fin          *finalizer
	ctl          *control
	sig          *engines.Report
	onFirstToken func(now time.Duration) // the first content event was parsed
	onEngineDone func(now time.Duration) // an event said the engine is done generating
}

func newRelay(w relayWiring) relay {
	return relay{
		relayWiring: w,
		src:         newEventSource(w.cfg.MaxEventBytes),
	}
}

// reset readies r for another request, keeping its wiring, buffers and
// decompressors.
func (r *relay) reset() {
	r.src.reset()
	r.dst.reset()
	*r = relay{relayWiring: r.relayWiring, src: r.src, scratch: r.scratch[:0], serverTiming: r.serverTiming[:0]}
}

// gatherer is a client writer that can take events into its next write.
type gatherer interface {
	io.Writer
	// Gather copies p into the next Write, which writes it before its own
	// bytes; false when that write has no room for p. Write(nil) writes
	// what was gathered.
	Gather(p []byte) bool
	// WriteEnd writes what was gathered and the body's end (with trailer,
	// the Server-Timing trailer's value) in one write.
	WriteEnd(trailer []byte) error
}

// WriteTo writes the stream to w, each Write one write to the client; with
// a gatherer, the events that arrived together go out in one (writeNext).
// It returns nil at the stream's clean end, the error writing to the
// client as it is, or the error that ended the stream on our side (then
// readErr too).
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	g, _ := w.(gatherer)
	var written int64
	for {
		var n int64
		var err error
		if r.src.pump != nil {
			n, err = r.pumpTo(w, g)
		} else {
			var k int
			k, err = r.writeNext(w, g)
			n = int64(k)
		}
		written += n
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}

// pumpTo writes events as writeNext does, for as long as the upstream
// sends them, in one pump of the upstream socket (sock.Conn.Pump): an
// event costs one read of the socket, not two. When the pump's wait fails
// (the heartbeat's read deadline passed), the next read returns that
// error: one writeNext takes it as its read's end.
func (r *relay) pumpTo(w io.Writer, g gatherer) (written int64, err error) {
	if hb := r.cfg.Heartbeat; hb > 0 {
		// A deadline already passed (the one a heartbeat answered) would
		// end the pump before its first read.
		_ = r.src.body.conn.SetReadDeadline(time.Now().Add(hb))
	}
	waitErr := r.src.pump.Pump(func() bool {
		for {
			n, e := r.writeNext(w, g)
			written += int64(n)
			if e == sock.ErrWouldBlock {
				return true
			}
			if e != nil {
				err = e
				return false
			}
		}
	})
	if waitErr != nil {
		n, e := r.writeNext(w, g)
		written, err = written+int64(n), e
	}
	return written, err
}

// writeNext writes the next block to w; io.EOF at the stream's clean end.
// With a gatherer (g, which is w), a block is gathered instead while the
// next one is already read whole (src.ready), up to maxGather: so the
// events of one upstream read go out in one write, and none waits for
// bytes still to come. Gathered events go out before any end but the
// client's own.
func (r *relay) writeNext(w io.Writer, g gatherer) (int, error) {
	b, err := r.block()
	switch {
	case err == errWriteGathered:
		r.handOut(0)
		_, err = w.Write(nil)
		return 0, err
	case err == io.EOF && g != nil:
		return 0, r.writeEnd(g)
	case err != nil:
		if r.dst.gathering() && !clientCause(r.ctl.aborted()) {
			r.handOut(0)
			if _, werr := w.Write(nil); werr == nil { // else the stream's end is still err's
				r.wrote()
			}
		}
		return 0, err
	case g != nil && !r.dst.full() && r.src.ready() && g.Gather(b):
		r.fin.rec.BytesOut += int64(len(b))
		r.dst.gather()
		return len(b), nil
	}
	r.handOut(len(b))
	return w.Write(b)
}

// writeEnd writes what is gathered with the body's end, in one write, once
// the upstream ended cleanly; io.EOF when it was written. It seals the
// request first: a client that leaves once it has the whole response did
// not cancel it.
func (r *relay) writeEnd(g gatherer) error {
	r.ctl.seal()
	r.handOut(0)
	if err := g.WriteEnd(r.serverTiming); err != nil {
		return err
	}
	r.wrote()
	return io.EOF
}

// errWriteGathered is block's word that events are gathered and the next
// one is not read whole: the gathered events are written before reading.
var errWriteGathered = errors.New("write the gathered events")

// block returns the bytes of the current event not yet handed out, reading
// the next event when they are all out. Entering it means what was handed
// out before reached the client socket.
func (r *relay) block() (b []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			b, err = nil, r.fin.panicked(v)
		}
		if err != nil && err != io.EOF && err != sock.ErrWouldBlock && err != errWriteGathered {
			r.readErr = err
		}
	}()
	rec := &r.fin.rec
	r.wrote()
	if len(r.dst.out) == 0 {
		if err := r.nextEvent(); err != nil {
			if err == io.EOF {
				// The last chunk is written next, however long the
				// upstream took to end after the last event.
				r.dst.stallArmedAt = 0
				r.armStall(rec.Timeline.Now())
			}
			return nil, err
		}
		if r.dst.enc != nil && !r.dst.enc.closed {
			r.dst.out = r.dst.enc.encode(r.dst.out)
		}
	}
	return r.dst.out, nil
}

// wrote records that the write made last returned: what it carried reached
// the client socket now.
func (r *relay) wrote() {
	if !r.dst.handedOut {
		return
	}
	rec := &r.fin.rec
	now := rec.Timeline.Now()
	if r.firstToken.Load() {
		rec.Stream.Blocked += now - r.dst.lastReturn
	}
	r.dst.flushed(now, rec)
}

// handOut records that the gathered events and the current block, n
// bytes, are on their way to the client, and bounds how long writing them
// may stall.
func (r *relay) handOut(n int) {
	now := r.fin.rec.Timeline.Now()
	r.dst.handOut(now)
	r.fin.rec.BytesOut += int64(n)
	r.armStall(now)
}

// armStall moves the client's write deadline to the write stall limit from
// now (delivery.armStall).
func (r *relay) armStall(now time.Duration) {
	r.dst.armStall(now, r.cfg.ClientWriteStall, r.fin.rec.Timeline.Wall())
}

// nextEvent parses upstream events until one is to be forwarded, and makes
// it the current output. The engine's protocol comments are consumed, not
// forwarded, unless configured otherwise. Its frame is on the path where a
// stream waits for the upstream, so what an event holds lives in the source
// (src.ev) and is read in take: an open stream's goroutine lives in a 4 KiB
// stack (ARCHITECTURE.md).
func (r *relay) nextEvent() error {
	hb := r.cfg.Heartbeat
	for {
		if r.ctl.clientLeft.Load() {
			// Whatever the upstream still sent goes to no one: left unread
			// for undelivered to count.
			return r.ctl.aborted()
		}
		if r.dst.gathering() && !r.src.ready() {
			return errWriteGathered // never read with events held back
		}
		if hb > 0 && !r.src.ndjson {
			_ = r.src.body.conn.SetReadDeadline(time.Now().Add(hb))
		}
		if err := r.src.next(); err != nil {
			if err == sock.ErrWouldBlock {
				return err // the pump waits for the upstream
			}
			if hb > 0 && isTimeout(err) && r.ctl.aborted() == nil {
				// The client is always between two whole events here (an
				// upstream event arriving in pieces stays in the scanner), so
				// the heartbeat never splits one.
				r.dst.set(heartbeat, r.fin.rec.Timeline.Now(), false)
				return nil
			}
			return r.streamEnd(err)
		}
		if out, err := r.take(); out || err != nil {
			return err
		}
	}
}

// take parses the event just read (src.ev) and makes it the current output;
// false when it is not forwarded (a protocol comment, the usage chunk the
// client did not ask for, an empty block).
func (r *relay) take() (bool, error) {
	tl := &r.fin.rec.Timeline
	ev := &r.src.ev
	now := tl.Now()
	if ev.Comments > 0 && r.sig.Comment(ev.Comment, tl) && !ev.HasData && !r.cfg.PassEngineTiming {
		return false, nil
	}
	content := false
	if ev.HasData {
		tl.Mark(stages.FirstEvent)
		r.fin.rec.Stream.Events++
		s := r.sig.Event(ev.Data, tl)
		if s.BadUTF8 {
			r.fin.facts.Read = endreason.ReadBadUTF8
			return false, r.fin.fail(errInvalidUTF8)
		}
		if s.Malformed {
			r.fin.facts.Read = endreason.ReadMalformed
			return false, r.fin.fail(errMalformedEvent)
		}
		r.observe(s, now)
		content, r.dst.outAnswer = s.Content, s.Answer()
		if r.dropUsage && s.UsageOnly {
			return false, nil // we asked for it; the client did not
		}
	}
	r.dst.set(ev.Raw, now, content)
	return len(r.dst.out) > 0, nil
}

// observe folds what an event said into the request's facts and clock.
func (r *relay) observe(s engines.Event, now time.Duration) {
	rec, f := &r.fin.rec, &r.fin.facts
	if s.Error {
		f.ErrorEvent = true
	}
	if s.Finish != endreason.FinishNone {
		f.Finish = s.Finish
	}
	if s.Done {
		f.Done = true
	}
	if s.Done || s.Finish != endreason.FinishNone {
		r.onEngineDone(now)
	}
	if s.Usage {
		rec.UsageReported = true
		rec.TokensOut, rec.TokensIn = s.CompletionTokens, s.PromptTokens
	}
	if s.Cached {
		rec.CachedTokens, rec.CachedReported = s.CachedTokens, true
	}
	if s.ReasoningUsage {
		r.reasoningUsage = true
		rec.ReasoningTokens = s.ReasoningTokens
	} else if s.Reasoning && !r.reasoningUsage {
		rec.ReasoningTokens++
	}
	if !s.Content {
		return
	}
	r.lastContent.Store(int64(now))
	st := &rec.Stream
	if reads, ok := r.src.body.readCount(); ok && st.ContentEvents < 2 {
		if st.ContentEvents == 0 {
			r.firstReads = reads
		} else {
			st.FirstTogether = reads == r.firstReads
		}
	}
	rec.Timeline.Mark(stages.FirstToken)
	rec.Timeline.MarkAt(stages.LastToken, now)
	if !r.firstToken.Swap(true) {
		r.onFirstToken(now)
	}
	// Gaps are measured without the time the proxy was blocked writing to
	// the client (it does not read the upstream meanwhile): a slow client
	// shows up as transport, not as decode.
	st.Content(now-st.Blocked, r.cfg.StallThreshold)
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
	errMalformedBody  = errors.New("upstream sent a JSON response body that is not valid JSON (or not UTF-8)")
	errInvalidUTF8    = errors.New("upstream sent an event that is not valid UTF-8")
	errNoDone         = errors.New("upstream ended the stream without a finish reason or [DONE]")
	errBodyTooLarge   = errors.New("upstream response body larger than the limit")
)

// streamEnd turns the end of the upstream stream into facts and the error
// block returns: io.EOF only for a stream that really finished, so the last
// chunk is written; anything else cuts the client's stream.
func (r *relay) streamEnd(err error) error {
	if cause := r.ctl.aborted(); cause != nil {
		return cause
	}
	f := &r.fin.facts
	if err != io.EOF {
		f.Read = readEnd(err)
		return r.fin.fail(err)
	}
	f.Read = endreason.ReadClean
	// A stream that ends cleanly after an error event is ended by the
	// engine: the client has the error. Any other end without a finish or
	// an end marker is cut, so it is never taken for complete.
	if !f.Done && f.Finish == endreason.FinishNone && !f.ErrorEvent {
		return r.fin.fail(errNoDone)
	}
	if r.breakdown && !r.breakdownSent && !r.src.ndjson {
		// One more block before the end: the client's own breakdown, of
		// every event written. The scanner returns io.EOF again on the next
		// call.
		if r.dst.gathering() {
			return errWriteGathered
		}
		r.breakdownSent = true
		r.dst.set(r.appendBreakdownComment(), r.fin.rec.Timeline.Now(), false)
		return nil
	}
	if r.dst.enc != nil && !r.dst.enc.closed {
		r.dst.set(r.dst.enc.close(), r.fin.rec.Timeline.Now(), false)
		return nil
	}
	return io.EOF
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

// readWhole reads a non-streamed upstream body, bounded by MaxBodyBytes.
// The result aliases r.scratch.
func (r *relay) readWhole() ([]byte, error) {
	limit := r.cfg.MaxBodyBytes
	buf := r.scratch[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.src.body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		r.scratch = buf
		if len(buf) > limit {
			r.fin.facts.Read = endreason.ReadBodyTooLarge
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if cause := r.ctl.aborted(); cause != nil {
				return nil, cause
			}
			r.fin.facts.Read = readEnd(err)
			return nil, err
		}
	}
}

// clientCause reports an abort cause that is the client's doing: it left,
// or stopped reading.
func clientCause(cause error) bool {
	return cause == errClientGone || cause == errClientStalled
}

// undelivered counts the content events the upstream sent that the relay
// held when its client left: the event being handed out (not yet flushed to
// the client), and the whole events already read from the upstream but not
// yet parsed. It reads nothing more from the upstream, so it must run only
// once the upstream connection is closed (the reads then end at what had
// arrived), before the body is let go.
func (r *relay) undelivered() int {
	if !r.src.body.open {
		return 0
	}
	n := r.dst.undelivered()
	tl := &r.fin.rec.Timeline
	for r.src.next() == nil {
		if r.src.ev.HasData && r.sig.Event(r.src.ev.Data, tl).Content {
			n++
		}
	}
	return n
}

// closeUpstream lets go of the upstream body, closing the connection unless
// the body was read to a clean end; it reports whether a body was open.
func (r *relay) closeUpstream(discard bool) bool {
	if !r.src.body.open {
		return false
	}
	r.fin.rec.Stream.Arrivals = r.src.body.arrivals()
	r.src.body.close(discard || r.fin.facts.Read != endreason.ReadClean)
	return true
}
