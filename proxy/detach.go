package proxy

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/internal/sock"
)

// A streamed response leaves fasthttp once its first event is parsed: the
// handler writes the response head and that event, hijacks the client
// connection and returns, so fasthttp lets go of
// what it holds while it serves a request (the connection's read and write
// buffers, the request context, the worker goroutine and its stack), which
// was most of what an open stream cost. The stream goes on in a goroutine
// of its own that writes the response head and then the events as the
// relay hands them out, one write for the events that arrived together
// (chunked for HTTP/1.1, the body
// ending at the close for HTTP/1.0, RFC 9112 §6.3), ends the body, and
// emits the record; the connection then goes back to fasthttp for the
// client's next request, or is closed.

// clientStream is how a detached stream writes to its client.
type clientStream struct {
	head      *[]byte   // the response head, written with the first event; from headBufs
	gathered  *[]byte   // events framed for the next write, from gatherBufs; nil when none is
	size      [18]byte  // an event's chunk size line
	vec       [5][]byte // one write's parts: head, gathered events, size line, event, CRLF
	buf       []byte    // one write copied whole, for a connection that cannot gather
	firstErr  error     // writing the head and the first event failed
	chunked   bool
	keepAlive bool     // the connection serves another request after this one
	handoff   *handoff // the connection's, between the hijack and the stream's end
}

// headBufs hold response heads until their first write, and gatherBufs
// gathered events until theirs: an open stream holds neither.
var (
	headBufs   = sync.Pool{New: func() any { return new([]byte) }}
	gatherBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxGatherBytes); return &b }}
)

// maxGatherBytes bounds the bytes of the events gathered for one write.
const maxGatherBytes = 16 << 10

// gather copies event p, framed, into the next write; false when the
// write has no room for it.
func (s *clientStream) gather(p []byte) bool {
	if s.gathered == nil {
		s.gathered = gatherBufs.Get().(*[]byte)
	}
	b := *s.gathered
	if len(b)+len(p)+len(s.size)+len(crlf) > maxGatherBytes {
		return false
	}
	if s.chunked {
		b = append(strconv.AppendInt(b, int64(len(p)), 16), crlf...)
	}
	b = append(b, p...)
	if s.chunked {
		b = append(b, crlf...)
	}
	*s.gathered = b
	return true
}

// writeEvent writes the gathered events and event p in one write: framed
// as chunks when the body is chunked, after the head when they are the
// first. p may be empty.
func (s *clientStream) writeEvent(conn net.Conn, p []byte) error {
	n := 0
	if s.head != nil {
		s.vec[n] = *s.head
		n++
	}
	if s.gathered != nil && len(*s.gathered) > 0 {
		s.vec[n] = *s.gathered
		n++
	}
	if len(p) > 0 {
		if s.chunked {
			s.vec[n] = append(strconv.AppendInt(s.size[:0], int64(len(p)), 16), "\r\n"...)
			n++
		}
		s.vec[n] = p
		n++
		if s.chunked {
			s.vec[n] = crlf
			n++
		}
	}
	err := s.write(conn, n)
	if s.head != nil {
		*s.head = (*s.head)[:0]
		headBufs.Put(s.head)
		s.head = nil
	}
	s.dropGathered()
	return err
}

// dropGathered lets go of the gathered events, written or not.
func (s *clientStream) dropGathered() {
	if s.gathered != nil {
		*s.gathered = (*s.gathered)[:0]
		gatherBufs.Put(s.gathered)
		s.gathered = nil
	}
}

// writeEnd writes the gathered events and ends the body, in one write:
// the last chunk of a chunked body, with the Server-Timing trailer when
// there is one; nothing more for a body that ends at the close.
func (s *clientStream) writeEnd(conn net.Conn, serverTiming []byte) error {
	n := 0
	if s.gathered != nil && len(*s.gathered) > 0 {
		s.vec[n] = *s.gathered
		n++
	}
	switch {
	case !s.chunked:
	case len(serverTiming) == 0:
		s.vec[n] = lastChunk
		n++
	default:
		s.vec[n], s.vec[n+1], s.vec[n+2] = lastChunkTrailer, serverTiming, crlfCRLF
		n += 3
	}
	var err error
	if n > 0 {
		err = s.write(conn, n)
	}
	s.dropGathered()
	return err
}

var (
	crlf             = []byte("\r\n")
	crlfCRLF         = []byte("\r\n\r\n")
	lastChunk        = []byte("0\r\n\r\n")
	lastChunkTrailer = []byte("0\r\nServer-Timing: ")
)

// write writes s.vec[:n] in one write: gathered by the raw writer, or
// copied into buf.
func (s *clientStream) write(conn net.Conn, n int) error {
	vec := s.vec[:n]
	defer clear(vec) // the event's bytes are the scanner's, not ours to keep
	if raw := sock.Of(conn); raw != nil {
		_, err := raw.WriteVec(vec)
		return err
	}
	b := s.buf[:0]
	for _, v := range vec {
		b = append(b, v...)
	}
	s.buf = b
	_, err := conn.Write(b)
	return err
}

// streamWriter is the gatherer the relay's WriteTo writes events to.
type streamWriter struct{ x *exchange }

func (w streamWriter) Gather(p []byte) bool { return w.x.out.gather(p) }

func (w streamWriter) WriteEnd(trailer []byte) error {
	return w.x.out.writeEnd(w.x.client.conn, trailer)
}

func (w streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 && w.x.out.gathered == nil {
		return 0, nil // an empty chunk would end the body
	}
	if err := w.x.out.writeEvent(w.x.client.conn, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// handoff is a detached stream's client connection between fasthttp and
// the stream's goroutine. fasthttp reports the hijack (StateHijacked) on
// its own goroutine, which may come after the stream ended; whichever of
// the two comes second hands the connection on.
type handoff struct {
	x     *exchange // until the hijack: fasthttp may close the connection instead
	keep  bool      // the stream ended cleanly and the client keeps the connection
	steps atomic.Int32
}

// detach hands the stream to its own goroutine (see above). The response
// headers are final; x belongs to the stream's goroutine from here until
// its record.
func (x *exchange) detach(ctx *fasthttp.RequestCtx, http10 bool) {
	h := &ctx.Response.Header
	h.SetServer(x.p.server.Name)
	s := &x.out
	s.chunked = !http10
	s.keepAlive = !http10 && !ctx.Request.Header.ConnectionClose() && !x.p.closing.Load()
	if http10 {
		h.SetContentLength(-2) // neither Content-Length nor Transfer-Encoding; Connection: close
	} else {
		h.SetContentLength(-1)
		if !s.keepAlive {
			h.SetConnectionClose()
		}
	}
	s.head = headBufs.Get().(*[]byte)
	*s.head = h.AppendBytes(*s.head)
	// The request is sent: its body is let go of now, and its share of the
	// body memory budget with it, not at the stream's end.
	x.sendBody = nil // a rewritten body is a copy of the prompt
	x.p.bodies.give(x.client.bodyKey, x.client.bodyHeld)
	x.client.bodyHeld = 0
	x.streaming = true
	s.handoff = &handoff{x: x}
	x.p.detached.Store(x.client.conn, s.handoff)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(x.hijacked)
	x.writeFirst()
}

// writeFirst writes the head and the first event in one write, and marks
// them delivered when it returns: the first token goes out now, not after
// fasthttp's hijack and two goroutines (fasthttp writes nothing of its
// own: no response), and its record says so.
func (x *exchange) writeFirst() {
	if _, x.out.firstErr = x.relay.writeNext(streamWriter{x}, nil); x.out.firstErr == nil {
		x.relay.wrote()
	}
}

// hijacked runs on fasthttp's hijack goroutine. It starts the stream's own
// goroutine and returns: fasthttp releases the request once it has.
func (x *exchange) hijacked(c net.Conn) {
	x.out.handoff.x = nil // the stream's now, not fasthttp's to end
	if x.out.keepAlive && pipelined(c) {
		// The client sent its next request already, which fasthttp read
		// ahead: it is not answered, and the connection ends with the
		// stream (a client that pipelines sends what was not answered
		// again, RFC 9112 §9.3.2).
		x.out.keepAlive = false
	}
	go x.stream()
}

// pipelined reports whether fasthttp had read bytes past the request: the
// hijacked connection reads them first. It reads without waiting (a
// deadline in the past), so it takes at most a byte the client sent.
func pipelined(c net.Conn) bool {
	if c.SetReadDeadline(time.Unix(1, 0)) != nil {
		return true // cannot tell: take it as pipelined, which only costs the reuse
	}
	var b [1]byte
	n, _ := c.Read(b[:])
	_ = c.SetReadDeadline(time.Time{})
	return n > 0
}

// stream relays the response to the client on its own goroutine, ends the
// request in its record, and hands the connection on.
func (x *exchange) stream() {
	p, conn, h := x.p, x.client.conn, x.out.handoff
	h.keep = x.relayToClient()
	p.release(x)
	if h.steps.Add(1) == 2 {
		p.detached.Delete(conn)
		p.nextRequest(conn, h.keep)
	}
}

// relayToClient writes the stream to the client and ends the request; true
// when the connection can serve the client's next request.
func (x *exchange) relayToClient() (keep bool) {
	defer func() {
		if v := recover(); v != nil {
			keep = false
			if !x.fin.done {
				x.fin.panicked(v)
				x.finish()
				return
			}
			x.p.log.Error().Str("request_id", x.fin.rec.RequestID).Interface("panic", v).Msg("recovered after the record")
		}
	}()
	r := &x.relay
	// fasthttp cleared the connection's deadlines after the handler: the
	// write stall deadline is set again before the first write.
	r.dst.stallArmedAt = 0
	r.armStall(x.fin.rec.Timeline.Now())
	err := x.out.firstErr
	if err == nil {
		_, err = r.WriteTo(streamWriter{x})
	}
	ours := r.readErr != nil // the relay cut the stream (its end reason says why): no last chunk
	if ours {
		err = nil
	}
	// The body's end went out with the last events (relay.writeEnd), the
	// request sealed first: a client that leaves once it has the whole
	// stream did not cancel it.
	x.endStream(err)
	return !ours && err == nil && x.out.chunked && x.out.keepAlive
}

// hijackedConn is fasthttp's report that it handed conn over. For a
// detached stream's connection it returns true after doing its step of the
// handoff.
func (p *Proxy) hijackedConn(conn net.Conn) bool {
	v, ok := p.detached.Load(conn)
	if !ok {
		return false
	}
	h := v.(*handoff)
	if h.steps.Add(1) == 2 {
		p.detached.Delete(conn)
		go p.nextRequest(conn, h.keep)
	}
	return true
}

// neverDetached ends the stream fasthttp closed conn under before handing it
// over (it could not clear the connection's deadlines): its client is gone.
func (p *Proxy) neverDetached(conn net.Conn) {
	v, ok := p.detached.LoadAndDelete(conn)
	if !ok {
		return
	}
	x := v.(*handoff).x
	x.endStream(errClientGone)
	p.release(x)
}

// nextRequest gives a detached stream's connection back to fasthttp for
// the client's next request, or closes it.
func (p *Proxy) nextRequest(conn net.Conn, keep bool) {
	p.contMu.Lock()
	if !keep || p.closing.Load() {
		p.contMu.Unlock()
		p.closeClient(conn)
		return
	}
	p.continued.Add(1)
	p.contMu.Unlock()
	defer p.continued.Done()
	if p.cfg.ClientWriteStall > 0 {
		_ = conn.SetWriteDeadline(time.Time{}) // the stream's stall deadline is not the next request's
	}
	// fasthttp takes a connection it is given as a new one: its read
	// timeout would run from now, not from the request's first byte, and
	// it would not take the connection for idle in its first 5 s (a
	// shutdown would wait them out). So the connection waits here, idle,
	// as long as fasthttp lets an idle one wait.
	if !sock.WaitReadable(conn, p.server.IdleTimeout) || p.closing.Load() {
		p.closeClient(conn)
		return
	}
	switch p.server.ServeConn(conn) { // it closes conn at the end
	case fasthttp.ErrConcurrencyLimit, fasthttp.ErrPerIPConnLimit:
		p.closeClient(conn) // refused without its StateClosed
	}
}

// closeClient closes a client connection fasthttp does not hold, and ends
// its registrations as fasthttp's StateClosed does.
func (p *Proxy) closeClient(conn net.Conn) {
	_ = conn.Close()
	p.connState(conn, fasthttp.StateClosed)
}
