package engines

import (
	"bytes"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// SourceServerTiming is the engine report's source when the durations came
// in the W3C Server-Timing protocol (a header, a trailer or the in-band
// comment), whatever the engine kind.
const SourceServerTiming = "server-timing"

// Report gathers what one request's engine says about it as the response
// passes: its durations (recorded on the request's timeline), where they
// came from, and the phase the engine last announced. The proxy asks a
// Report and never reads an engine's signals itself. Not safe for
// concurrent use; one per request, kept across requests (Begin resets it).
//
// For one request:
//
//	r.Begin(kind, reqHeader)          // once the upstream is chosen (again on a retry)
//	body, drop := r.UpstreamBody(...) // the body to send upstream
//	r.Headers(resp.Peek, tl)          // once the upstream headers are read
//	r.Comment(c, tl) / r.Event(d, tl) // per SSE comment and data, or once with a whole body
//	r.End(trailer.Peek, tl, slotWait) // after the body ended
//	r.Source(), r.Phase(...)          // for the record
type Report struct {
	rd          Reader
	source      string
	phase       endreason.Phase
	heldHeaders bool // the request asked the reference engine to hold its headers
	// wholeDecode is the decode the engine reported with the first content
	// and the end (a whole body): generated before the first token reached
	// the proxy.
	wholeDecode time.Duration
	readers     []Reader // one per kind met, reused across requests
}

// Begin readies r for a request to an engine of kind (one of Kinds; an
// unknown kind reads as generic). reqHeader reads the request's headers.
func (r *Report) Begin(kind string, reqHeader func(name string) []byte) {
	r.rd, r.source, r.phase, r.wholeDecode = r.reader(kind), "", endreason.PhaseNone, 0
	r.heldHeaders = kind == KindReference && WithholdsHeaders(reqHeader(FaultHeader))
}

// Reset forgets the last request (keeping the readers).
func (r *Report) Reset() { *r = Report{readers: r.readers} }

// reader returns r's reader of kind, reset for this request.
func (r *Report) reader(kind string) Reader {
	for _, rd := range r.readers {
		if rd.Kind() == kind {
			rd.Reset()
			return rd
		}
	}
	rd, err := NewReader(kind)
	if err != nil {
		rd, _ = NewReader(KindGeneric)
	}
	r.readers = append(r.readers, rd)
	return rd
}

// UpstreamBody returns the request body to send upstream and whether the
// relay must drop the usage-only chunk: for vLLM and the reference engine,
// a streamed completion whose client did not ask for usage asks for it
// (vLLM's usage chunk carries its timing; both carry the cached prompt
// tokens least_ttft learns from), and the chunk is then kept from the
// client. buf is reused for a changed body; body itself is returned when
// nothing changes.
func (r *Report) UpstreamBody(body, buf []byte, completion, streaming, clientAskedUsage bool) (send []byte, dropUsage bool) {
	if k := r.rd.Kind(); (k != KindVLLM && k != KindReference) || !completion || !streaming || clientAskedUsage {
		return body, false
	}
	out, added, err := EnsureIncludeUsage(body, buf[:0])
	if err != nil || !added {
		return body, false
	}
	return out, true
}

// Headers reads the response headers (and, from End, the trailers). The
// Server-Timing protocol is read for every kind, and names the source when
// it reported anything.
func (r *Report) Headers(h func(name string) []byte, tl *stages.Timeline) {
	if r.source == "" && ParseServerTiming(h("Server-Timing"), tl) > 0 {
		r.source = SourceServerTiming
	}
	if r.rd.Header(h, tl) && r.source == "" {
		r.source = r.rd.Kind()
	}
}

// Comment reads an SSE comment; it reports whether the comment belongs to
// the engine's protocol (timing or progress), which the relay keeps from
// the client unless configured otherwise.
func (r *Report) Comment(c []byte, tl *stages.Timeline) bool {
	switch {
	case bytes.HasPrefix(c, ServerTimingPrefix):
		if ParseServerTiming(c[len(ServerTimingPrefix):], tl) > 0 {
			r.source = SourceServerTiming
		}
	case bytes.HasPrefix(c, PhasePrefix):
		if p := ParsePhase(c[len(PhasePrefix):]); p != endreason.PhaseNone {
			r.phase = p
		}
	default:
		return false
	}
	return true
}

// Event reads one event's data (or a whole non-streamed body) with the
// engine's reader.
func (r *Report) Event(data []byte, tl *stages.Timeline) Event {
	ev := r.rd.Event(data, tl)
	if ev.Timing {
		r.source = r.rd.Kind()
		if k := r.Recognised(); k != "" {
			r.source = k
		}
	}
	if ev.Content && ev.Decode > 0 && (ev.Done || ev.Finish != endreason.FinishNone) && tl != nil && !tl.Has(stages.FirstToken) {
		r.wholeDecode = ev.Decode
	}
	return ev
}

// Recognised names the engine kind a response read as generic showed
// itself to be (see GenericReader), "" when it did not: the proxy settles
// the kind of an upstream it has not identified with it.
func (r *Report) Recognised() string {
	if g, ok := r.rd.(*GenericReader); ok {
		return g.Recognised()
	}
	return ""
}

// End reads the trailers after the body ended, and infers the engine queue
// where the engine reported none (InferQueue, which slotWait is given to;
// tl.Inferred says what was inferred).
func (r *Report) End(trailer func(name string) []byte, tl *stages.Timeline, slotWait time.Duration) {
	if r.rd == nil {
		return // the request never reached an engine
	}
	r.Headers(trailer, tl)
	inferQueue(tl, slotWait, r.wholeDecode)
}

// Source names what reported the engine's durations: SourceServerTiming, a
// reader's kind, or "" when nothing did.
func (r *Report) Source() string { return r.source }

// Phase is where the engine said a cancelled request was: its last progress
// comment or, for a stream from the reference engine (which sends a
// stream's headers once the request is prepared), preparing while it had
// the request and no headers yet. PhaseNone when it said nothing (a
// non-streamed response's headers come with its end, and the hold_headers
// fault holds a stream's until the first token).
func (r *Report) Phase(streaming bool, tl *stages.Timeline) endreason.Phase {
	if r.phase == endreason.PhaseNone && streaming && r.rd != nil && r.rd.Kind() == KindReference &&
		tl.Has(stages.UpstreamSent) && !tl.Has(stages.UpstreamHeaders) && !r.heldHeaders {
		return endreason.PhasePreparing
	}
	return r.phase
}

// IsTimingHeader reports a response header that carries the engine's
// timing (consumed by the proxy unless configured to pass it on).
func IsTimingHeader(name []byte) bool { return bytes.EqualFold(name, []byte("Server-Timing")) }

var (
	pathMessages = []byte("/v1/messages")
	pathOllama   = []byte("/api/")
)

// KindFor is the reader kind for a request: a path only one protocol uses
// decides (Anthropic Messages; Ollama's /api/chat and /api/generate),
// otherwise the upstream's engine (SGLang's and TGI's native /generate
// share a path, so the engine tells them apart).
func KindFor(path []byte, upstreamKind string) string {
	switch {
	case bytes.Equal(path, pathMessages):
		return KindAnthropic
	case bytes.HasPrefix(path, pathOllama):
		return KindOllama
	}
	return upstreamKind
}
