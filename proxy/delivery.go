package proxy

import (
	"net"
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// delivery is a relay's side toward the client: the event being handed
// out (compressed when the client asked), the events gathered into one
// client write with it, the client's write stall deadline, and when each
// event reached the client socket, which ends its residency in the proxy.
// Going on to the next block means the write made before reached the
// client socket. Only the request's goroutine touches it.
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

	// The events in the client write being gathered or made, not yet known
	// to have reached the client socket: when each was parsed, how many
	// carry content, and whether one carries answer.
	inWrite        [maxGather]time.Duration
	nInWrite       int
	contentInWrite int
	answerInWrite  bool
	handedOut      bool          // the write was made
	lastReturn     time.Duration // when it was
}

// maxGather bounds the events gathered into one client write.
const maxGather = 16

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

// gather takes the current block into the client write being gathered.
func (d *delivery) gather() {
	if len(d.out) == 0 {
		return
	}
	d.inWrite[d.nInWrite] = d.outParsed
	d.nInWrite++
	if d.outContent {
		d.contentInWrite++
		d.answerInWrite = d.answerInWrite || d.outAnswer
	}
	d.out = nil
}

// gathering reports events gathered into a write not yet made; full, that
// the write takes one more, the one handed out with them.
func (d *delivery) gathering() bool { return d.nInWrite > 0 && !d.handedOut }
func (d *delivery) full() bool      { return d.nInWrite == maxGather-1 }

// handOut records that the write of the gathered events and the current
// block starts at now.
func (d *delivery) handOut(now time.Duration) {
	d.gather()
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

// flushed records in rec that the write made last reached the client
// socket at now, with every event in it.
func (d *delivery) flushed(now time.Duration, rec *record.Record) {
	for _, parsed := range d.inWrite[:d.nInWrite] {
		rec.Stream.Flushed(now - parsed)
	}
	if d.contentInWrite > 0 {
		markDelivered(&rec.Timeline, d.answerInWrite)
	}
	d.nInWrite, d.contentInWrite, d.answerInWrite, d.handedOut = 0, 0, false, false
}

// undelivered counts the content events d holds that did not reach the
// client socket: those in a write not made or failed, and the current
// block's; it forgets them.
func (d *delivery) undelivered() int {
	n := d.contentInWrite
	if d.outContent && len(d.out) > 0 {
		n++
	}
	d.out, d.outContent = nil, false
	d.nInWrite, d.contentInWrite, d.answerInWrite, d.handedOut = 0, 0, false, false
	return n
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
