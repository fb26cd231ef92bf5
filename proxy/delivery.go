package proxy

import (
	"net"
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// delivery is a relay's side toward the client: the event being handed
// out (compressed when the client asked), the client's write stall
// deadline, and when each event reached the client socket, which ends its
// residency in the proxy. Going on to the next block means the one handed
// out before reached the client socket. Only the request's goroutine
// touches it.
type delivery struct {
	// The client's connection, whose write deadline bounds a write stall;
	// stallArmedAt is when the deadline was last moved.
	conn         net.Conn
	stallArmedAt time.Duration
	enc          *encoder // for a compressed stream to the client

	// The event being handed out.
	out        []byte        // its bytes not yet handed out
	outParsed  time.Duration // when it was parsed
	outContent bool          // it carries generated content
	outAnswer  bool          // ...and answer, not reasoning only (read with outContent)
	handedOut  bool          // the last block was handed out
	lastReturn time.Duration // when it was
}

// reset readies d for another request.
func (d *delivery) reset() {
	if d.enc != nil {
		d.enc.release()
	}
	*d = delivery{}
}

// set makes b, parsed at parsed, the block to hand out next.
func (d *delivery) set(b []byte, parsed time.Duration, content bool) {
	d.out, d.outParsed, d.outContent = b, parsed, content
}

// handOut records that the first n bytes of the current block are on
// their way to the client at now.
func (d *delivery) handOut(n int, now time.Duration) {
	d.out = d.out[n:]
	d.handedOut = true
	d.lastReturn = now
}

// armStall moves the client's write deadline to stall from now (wall is
// the request clock's start), before the block handed out is written. It
// moves it only when half the limit has passed since it last did (a
// deadline is a timer update, not free per event), so a write blocks
// between half the limit and the whole of it before it fails.
func (d *delivery) armStall(now, stall time.Duration, wall time.Time) {
	if stall <= 0 || d.conn == nil || (d.stallArmedAt > 0 && now-d.stallArmedAt < stall/2) {
		return
	}
	d.stallArmedAt = max(now, 1)
	_ = d.conn.SetWriteDeadline(wall.Add(now + stall))
}

// flushed records in rec that the event handed out last reached the
// client socket at now.
func (d *delivery) flushed(now time.Duration, rec *record.Record) {
	rec.Stream.Flushed(now - d.outParsed)
	if d.outContent {
		markDelivered(&rec.Timeline, d.outAnswer)
	}
}

// markDelivered marks a content event reaching the client: the first
// token, and the first answer when the event carries answer. A model that
// does not reason answers with its first token: both marks are then the
// same moment.
func markDelivered(tl *stages.Timeline, answer bool) {
	if !tl.Has(stages.FirstTokenFlushed) {
		tl.Mark(stages.FirstTokenFlushed)
		if answer {
			at, _ := tl.At(stages.FirstTokenFlushed)
			tl.MarkAt(stages.FirstAnswer, at)
		}
		return
	}
	if answer {
		tl.Mark(stages.FirstAnswer)
	}
}
