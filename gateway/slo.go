package gateway

import (
	"strconv"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// HeaderTTFTSLO is the request header stating the time to first token the
// client needs, in milliseconds (a positive integer): in a least_ttft pool
// a request no upstream is predicted to answer within it is refused at
// once (RefuseSLO) rather than queued to miss it, unless it is sent past
// it as a probe of models measured long ago (Choice.PastSLO). It replaces
// the route's ttft_slo, shorter or longer.
const HeaderTTFTSLO = "X-Ttftlens-TTFT-SLO-Ms"

// SLO is the TTFT SLO of a request on r: h, the raw HeaderTTFTSLO value,
// when sent, else the route's ttft_slo (0: none). A value that is not a
// positive integer is a 400 Rejection (invalid_parameter).
func (r *Route) SLO(h []byte) (time.Duration, *Rejection) {
	if len(h) == 0 {
		return r.TTFTSLO, nil
	}
	return applyHeader(HeaderTTFTSLO, h, 0, 0)
}

// RefuseSLO is the 429 Rejection (deadline/ttft_slo_unmeetable) of a
// request of TTFT SLO slo that spent elapsed before routing, when c, the
// choice of its least_ttft pool (the lowest prediction the load bound
// allowed, unless one within what is left of the SLO was chosen to stay
// home or to place a prompt), is predicted to miss it; nil when it is
// predicted to meet it, when there is no SLO, when there is no
// prediction (a cold model refuses nothing), or when c is a probe past
// the SLO (Choice.PastSLO: models measured long ago refuse nothing
// either). Retry-After is the predicted excess, at least a second:
// roughly how long the queue that makes it needs to drain.
func RefuseSLO(c *Choice, slo, elapsed time.Duration) *Rejection {
	if slo <= 0 || !c.Predicted || c.PastSLO {
		return nil
	}
	predicted := elapsed + c.Prediction.Total
	if predicted <= slo {
		return nil
	}
	secs := int(min((predicted-slo+time.Second-1)/time.Second, maxHeaderMs/1000))
	return &Rejection{
		Status: 429, RetryAfter: max(secs, 1), Type: "rate_limit_exceeded", Code: "ttft_slo_unmeetable",
		Message: "No upstream is predicted to give the first token within the " + strconv.FormatInt(slo.Milliseconds(), 10) +
			" ms asked (" + HeaderTTFTSLO + " or the route's ttft_slo): the soonest is " +
			strconv.FormatInt(predicted.Milliseconds(), 10) + " ms; retry later or allow more.",
		Reason: endreason.Deadline, Detail: endreason.DetailSLOUnmeetable,
	}
}
