package proxy

import (
	"github.com/ttftlens/ttftlens/stages"
)

// breakdownHeader is the request header with which a client asks for its
// own TTFT breakdown (when Config.AllowBreakdown).
const breakdownHeader = "X-Ttftlens-Breakdown"

// appendServerTiming appends the stages as a W3C Server-Timing value:
// ttft;dur=35.512, gateway;dur=0.102, … (milliseconds; the stages add up to
// ttft exactly).
func appendServerTiming(dst []byte, bd *stages.Breakdown) []byte {
	var us [stages.NumStages]int64
	ttft := bd.Micros(&us)
	dst = append(dst, "ttft;dur="...)
	dst = stages.AppendMillis(dst, ttft)
	for s, v := range us {
		dst = append(dst, ", "...)
		dst = append(dst, stages.Stage(s).String()...)
		dst = append(dst, ";dur="...)
		dst = stages.AppendMillis(dst, v)
	}
	return dst
}

// appendBreakdownComment builds the closing SSE comment with the client's
// breakdown, and the Server-Timing trailer's value. The result aliases
// r.scratch.
func (r *relay) appendBreakdownComment() []byte {
	bd := r.fin.rec.Breakdown()
	if !bd.OK {
		r.scratch = append(r.scratch[:0], ": ttftlens no token reached the client\n\n"...)
		return r.scratch
	}
	const prefix = ": ttftlens "
	r.scratch = append(r.scratch[:0], prefix...)
	r.scratch = appendServerTiming(r.scratch, &bd)
	if r.trailer {
		r.serverTiming = append(r.serverTiming[:0], r.scratch[len(prefix):]...)
	}
	r.scratch = append(r.scratch, "\n\n"...)
	return r.scratch
}
