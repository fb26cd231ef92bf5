package gateway

import (
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// The request headers that ask for other deadlines, in milliseconds (a
// positive integer). Each may shorten the route's deadline as much as the
// client likes, and lengthen it up to the route's max_total_deadline /
// max_first_token_deadline; a longer value is clamped to that bound (a
// bound lowered by a reload must not start failing clients that send a
// fixed header).
const (
	HeaderDeadline     = "X-Ttftlens-Deadline-Ms"      // total deadline
	HeaderTTFTDeadline = "X-Ttftlens-TTFT-Deadline-Ms" // first-token deadline
)

// Deadlines are a request's deadlines, measured from receipt; 0 means none.
type Deadlines struct {
	FirstToken time.Duration
	Total      time.Duration
}

// maxHeaderMs bounds a header value (a year) so it cannot overflow; it
// exceeds 32 bits, so the value is parsed into an int64.
const maxHeaderMs = 365 * 24 * 3600 * 1000

// Deadlines returns the deadlines of a request on r. fallback is the
// proxy's own (flags) for a route that sets none. total and ttft are the
// raw values of HeaderDeadline and HeaderTTFTDeadline (nil or empty when
// absent). A value that is not a positive integer is a 400 Rejection
// (invalid_parameter, Param = the header's name).
func (r *Route) Deadlines(fallback Deadlines, total, ttft []byte) (Deadlines, *Rejection) {
	var d Deadlines
	var rej *Rejection
	if d.Total, rej = applyHeader(HeaderDeadline, total, pick(r.TotalDeadline, fallback.Total), r.MaxTotalDeadline); rej != nil {
		return Deadlines{}, rej
	}
	if d.FirstToken, rej = applyHeader(HeaderTTFTDeadline, ttft, pick(r.FirstTokenDeadline, fallback.FirstToken), r.MaxFirstTokenDeadline); rej != nil {
		return Deadlines{}, rej
	}
	return d, nil
}

func pick(route, fallback time.Duration) time.Duration {
	if route > 0 {
		return route
	}
	return max(fallback, 0)
}

// applyHeader returns the deadline a header asks for, within bound (0: the
// base itself); base is the deadline without the header (0: none).
func applyHeader(name string, h []byte, base, bound time.Duration) (time.Duration, *Rejection) {
	if len(h) == 0 {
		return base, nil
	}
	var ms int64
	for _, c := range h {
		if c < '0' || c > '9' || ms > maxHeaderMs {
			return 0, headerRejection(name)
		}
		ms = ms*10 + int64(c-'0')
	}
	if ms < 1 || ms > maxHeaderMs {
		return 0, headerRejection(name)
	}
	want := time.Duration(ms) * time.Millisecond
	bound = max(bound, base)
	if bound == 0 {
		return want, nil // no deadline to lengthen: any value shortens "none"
	}
	return min(want, bound), nil
}

func headerRejection(name string) *Rejection {
	return &Rejection{
		Status: 400, Type: "invalid_request_error", Param: name, Code: "invalid_value",
		Message: name + " must be a positive whole number of milliseconds.",
		Reason:  endreason.InvalidRequest, Detail: endreason.DetailInvalidParam,
	}
}
