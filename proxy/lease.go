package proxy

import (
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// lease is what the gateway granted one request: its key's quota
// reservation, its upstream and admission slot, and its deadlines. settle
// gives it all back, once, at the request's end. A zero lease holds nothing.
type lease struct {
	dl        deadlines
	up        *gateway.Upstream // nil until routed
	choice    gateway.Choice    // how up was chosen
	slo       time.Duration     // the request's TTFT SLO (0: none)
	release   func()            // the admission slot; nil when none is held
	res       gateway.Reservation
	hasRes    bool
	promptEst int // the gateway's prompt-token estimate, for settling quota
	// closing: the response said `Connection: close` (or was HTTP/1.0
	// without keep-alive), as an engine does while it shuts down or drains.
	closing bool
}

// releaseSlot gives the admission slot back early (before a retry).
func (l *lease) releaseSlot() {
	if l.release != nil {
		l.release()
		l.release = nil
	}
}

// settle gives back what the gateway lent: the upstream's health verdict,
// the admission slot, the quota reservation (charged with the real usage,
// or the prompt estimate where the upstream reported none; not charged for
// a request that was refused or never reached the engine).
func (l *lease) settle(gw *gateway.Gateway, f *endreason.Facts, rec *record.Record) {
	if l.up != nil {
		gw.Done(l.up, !upstreamFault(f, l.closing))
	}
	l.choice.Prefilled() // ended without a first token, if it has none
	l.releaseSlot()
	if !l.hasRes {
		return
	}
	if f.Rejected != 0 || !rec.Timeline.Has(stages.UpstreamSent) {
		l.res.Cancel()
		return
	}
	in := rec.TokensIn
	if in == 0 {
		in = l.promptEst
	}
	l.res.Settle(in + rec.TokensOut)
}

// upstreamFault reports failures that count against the upstream's health:
// it could not be reached, failed, or broke the stream. A pooled connection
// the upstream had closed while idle is not one: the transport sends the
// request again on a new connection (upstream.roundTrip), and only that
// attempt's end becomes a fact. Nor is a response over one of our limits
// (headers, body, event). Nor is the engine's own shutdown, when its
// response said `Connection: close` (closing): a 503 while it drains, or a
// body it then cut with a FIN (a crash's RST still counts).
func upstreamFault(f *endreason.Facts, closing bool) bool {
	return f.ConnectFailed || f.ClosedBeforeResponse || f.MalformedHeaders || f.Status >= 500 && !(closing && f.Status == 503) ||
		f.ErrorEvent || f.Finish == endreason.FinishError || f.Read == endreason.ReadReset ||
		f.Read == endreason.ReadTruncated && !closing || f.Read == endreason.ReadFailed
}
