package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Telling a stream that was held back upstream from one that arrived as it
// was generated. An engine writes each event as it produces it, or a few
// together when it lags a step or coalesces tokens, and a middlebox that
// passes the stream through (nginx, with proxy_buffering on too) forwards
// what each of its reads got: one to three content events per TCP segment.
// A middlebox that holds the stream releases kilobytes at a time (dozens of
// events per segment on one host; across a link, a segment's worth, about
// six of an OpenAI-shaped stream's events) or everything at the end. So the
// rule counts the pieces the response came in (stages.Stream.Arrivals)
// against its content events. The pieces are the segments the kernel
// received, not what the proxy's reads returned: a proxy short of CPU, or
// blocked on a slow client, reads many segments at once, which says nothing
// about the upstream. No duration is involved: a small model on a CPU
// decodes as fast as a held-back stream is released.
const (
	// burstMinEvents: fewer content events say nothing about their arrival.
	burstMinEvents = 8
	// burstEventsPerPiece: a stream is a burst when its content events
	// came at least this many per piece on average. Engines and pass-through
	// middleboxes send one to three per piece; a 4 KiB piece holds about
	// sixteen of an OpenAI-shaped stream's events, and a segment of an
	// Ethernet link (1448 bytes), across which a piece arrives split, six.
	burstEventsPerPiece = 4
	// framingPieces: the pieces of a response that need carry no content,
	// its headers and its end.
	framingPieces = 2
)

// shapeBuffering reads the signs of buffering in a response's headers.
func shapeBuffering(h *fasthttp.ResponseHeader, streaming bool) record.Buffering {
	var b record.Buffering
	eventStream := isEventStream(h.ContentType()) || isNDJSON(h.ContentType())
	if streaming && !eventStream && h.StatusCode() < 300 {
		b |= record.BufferedNotStream
	}
	if eventStream && h.ContentLength() >= 0 {
		b |= record.BufferedContentLength
	}
	if ce := h.ContentEncoding(); len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
		b |= record.BufferedCompressed
	}
	return b
}

// arrivalBuffering reads the signs of buffering in how content arrived.
func arrivalBuffering(s *stages.Stream) record.Buffering {
	if s.ContentEvents < burstMinEvents || s.Arrivals == 0 {
		return 0
	}
	pieces := max(s.Arrivals-framingPieces, 1)
	if s.ContentEvents < burstEventsPerPiece*pieces {
		return 0
	}
	b := record.BufferedBurst
	if s.FirstTogether {
		// The first token was held back with the ones after it (it came in
		// one read with the second): the buffering delayed it too.
		b |= record.BufferedLateFirst
	}
	return b
}
