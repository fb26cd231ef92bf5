package bench

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// Percentile returns the nearest-rank percentile q (0 < q <= 1) of sorted
// values (zero for none).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortedCopy(v []time.Duration) []time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}

// Count is how many requests ended one way, and their share.
type Count struct {
	Reason string  `json:"end_reason"`
	Detail string  `json:"end_detail,omitempty"`
	N      int     `json:"count"`
	Share  float64 `json:"share"`
}

// Breakdown is the client-seen TTFT split into the proxy's stages plus
// Outside, for the joined requests that got a first token.
type Breakdown struct {
	// N is the number of requests it is computed over.
	N int
	// P50 and P99 are the parts of the requests at those ranks of client
	// TTFT (nearest rank): one real request each, so their parts add up
	// to its client TTFT.
	P50, P99 RequestParts
	// Median is each part's own median over the requests, and
	// MedianClientTTFT and MedianProxyTTFT the medians of the totals;
	// medians of parts need not add up to the median total.
	Median           [NumParts]time.Duration
	MedianClientTTFT time.Duration
	MedianProxyTTFT  time.Duration
	// MedianEngine is each engine duration's median (tokenize, media,
	// sync, ...) over the requests that reported it, for naming what
	// inside a stage moved.
	MedianEngine map[string]time.Duration
	// MedianWindow is the median of the upstream window as the proxy's own
	// clock measured it: from routing to the first token handed to the
	// client, which is the proxy TTFT less gateway and route. The engine's
	// reported parts, unattributed and transport split this window, so its
	// growth is the proxy-side check on what the engine says.
	MedianWindow time.Duration
	// Buffered counts requests whose record carries a buffering sign.
	Buffered int
}

// RequestParts is one request's client TTFT and its parts.
type RequestParts struct {
	ID         string
	ClientTTFT time.Duration
	ProxyTTFT  time.Duration
	Parts      [NumParts]time.Duration
}

// Summary is a run's figures over its measured (non-warm-up) requests.
type Summary struct {
	Requests int
	// Errors counts requests that did not end in a complete response (by
	// the client's view).
	Errors  int
	Elapsed time.Duration
	// RequestsPerSec is complete responses per second: a failed request
	// is not throughput.
	RequestsPerSec     float64
	OutputTokensPerSec float64
	// TTFT is over the WithTTFT requests that got a first token, ITL over
	// the Gaps inter-token gaps seen; with none, their percentiles are
	// zero and mean nothing (shown as n/a).
	TTFT     struct{ P50, P90, P99 time.Duration }
	ITL      struct{ P50, P99 time.Duration }
	E2E      struct{ P50, P99 time.Duration }
	WithTTFT int
	Gaps     int
	// TopErrors are the most common error texts of the failed requests
	// (at most MaxTopErrors, most frequent first); ErrorKinds is how many
	// different texts there were in all.
	TopErrors  []ErrorCount
	ErrorKinds int
	// MaxLag is the latest any request started after it was due (open loop).
	MaxLag time.Duration
	// EndReasons come from the joined records; requests without one are
	// counted by the client's view of their end (Result.End) with Detail
	// "client".
	EndReasons []Count
	// Joined is how many results have a record; JoinNote says why none
	// were joined, when so.
	Joined    int
	JoinNote  string
	Breakdown *Breakdown // nil when no joined request had a first token
}

// ErrorCount is how many failed requests ended with one error text.
type ErrorCount struct {
	Text string `json:"error"`
	N    int    `json:"count"`
}

// MaxTopErrors is how many error texts a Summary keeps.
const MaxTopErrors = 3

// localPort matches the ephemeral local port of a connection in an error
// text ("read tcp 127.0.0.1:53412->127.0.0.1:8080: ..."), which would
// otherwise make every request's error text different.
var localPort = regexp.MustCompile(`:\d+->`)

// ErrorText is the text a failed result is counted under: its error, or a
// description of how it ended when there is no error text.
func (r *Result) ErrorText() string {
	text := r.Err
	switch {
	case text != "":
		text = localPort.ReplaceAllString(text, ":*->")
	case r.End == "cut":
		text = "the stream ended without [DONE] or a finish_reason"
	case r.End == "timeout":
		text = "no complete response within --timeout"
	case strings.HasPrefix(r.End, "http_"):
		text = "HTTP " + strings.TrimPrefix(r.End, "http_")
	default:
		text = r.End
	}
	return text
}

// AllFailed reports a run in which requests were measured and none got a
// complete response.
func (s *Summary) AllFailed() bool { return s.Requests > 0 && s.Errors == s.Requests }

// Summarize computes the figures of a run.
func Summarize(run *Run) Summary {
	s := Summary{Elapsed: run.Elapsed, JoinNote: run.JoinNote}
	var ttft, itl, e2e []time.Duration
	tokens := 0
	counts := map[[2]string]int{}
	errTexts := map[string]int{}
	var joined []*Result
	for i := range run.Results {
		r := &run.Results[i]
		if r.Warmup {
			continue
		}
		s.Requests++
		if !r.OK() {
			s.Errors++
			errTexts[r.ErrorText()]++
		}
		if r.HasTTFT {
			ttft = append(ttft, r.TTFT)
		}
		itl = append(itl, r.Gaps...)
		e2e = append(e2e, r.E2E)
		tokens += r.Tokens
		s.MaxLag = max(s.MaxLag, r.Lag)
		if r.Record != nil {
			s.Joined++
			counts[[2]string{r.Record.EndReason, r.Record.EndDetail}]++
			joined = append(joined, r)
		} else {
			counts[[2]string{r.End, "client"}]++
		}
	}
	if s.Elapsed > 0 {
		s.RequestsPerSec = float64(s.Requests-s.Errors) / s.Elapsed.Seconds()
		s.OutputTokensPerSec = float64(tokens) / s.Elapsed.Seconds()
	}
	s.WithTTFT, s.Gaps = len(ttft), len(itl)
	ttft, itl, e2e = sortedCopy(ttft), sortedCopy(itl), sortedCopy(e2e)
	s.TTFT.P50, s.TTFT.P90, s.TTFT.P99 = Percentile(ttft, .5), Percentile(ttft, .9), Percentile(ttft, .99)
	s.ITL.P50, s.ITL.P99 = Percentile(itl, .5), Percentile(itl, .99)
	s.E2E.P50, s.E2E.P99 = Percentile(e2e, .5), Percentile(e2e, .99)
	for k, n := range counts {
		s.EndReasons = append(s.EndReasons, Count{Reason: k[0], Detail: k[1], N: n, Share: float64(n) / float64(s.Requests)})
	}
	slices.SortFunc(s.EndReasons, func(a, b Count) int {
		return cmp.Or(b.N-a.N, cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Detail, b.Detail))
	})
	s.Breakdown = breakdown(joined)
	s.ErrorKinds = len(errTexts)
	for text, n := range errTexts {
		s.TopErrors = append(s.TopErrors, ErrorCount{Text: text, N: n})
	}
	slices.SortFunc(s.TopErrors, func(a, b ErrorCount) int { return cmp.Or(b.N-a.N, cmp.Compare(a.Text, b.Text)) })
	if len(s.TopErrors) > MaxTopErrors {
		s.TopErrors = s.TopErrors[:MaxTopErrors]
	}
	return s
}

// breakdown splits the client TTFT of the joined results that got a first
// token on both sides.
func breakdown(joined []*Result) *Breakdown {
	var rows []RequestParts
	engine := map[string][]time.Duration{}
	buffered := 0
	for _, r := range joined {
		out, ok := r.Outside()
		if !ok {
			continue
		}
		rp := RequestParts{ID: r.ID, ClientTTFT: r.TTFT, ProxyTTFT: r.Record.TTFT}
		copy(rp.Parts[:], r.Record.Stages[:])
		rp.Parts[Outside] = out
		rows = append(rows, rp)
		for k, v := range r.Record.Engine {
			engine[k] = append(engine[k], v)
		}
		if len(r.Record.Buffering) > 0 {
			buffered++
		}
	}
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, func(a, b RequestParts) int { return cmp.Compare(a.ClientTTFT, b.ClientTTFT) })
	pick := func(q float64) RequestParts {
		i := int(q*float64(len(rows))+0.999999) - 1
		return rows[min(max(i, 0), len(rows)-1)]
	}
	b := &Breakdown{N: len(rows), P50: pick(.5), P99: pick(.99), Buffered: buffered, MedianEngine: map[string]time.Duration{}}
	col := make([]time.Duration, len(rows))
	for p := range NumParts {
		for i := range rows {
			col[i] = rows[i].Parts[p]
		}
		b.Median[p] = Percentile(sortedCopy(col), .5)
	}
	for i := range rows {
		col[i] = rows[i].ClientTTFT
	}
	b.MedianClientTTFT = Percentile(sortedCopy(col), .5)
	for i := range rows {
		col[i] = rows[i].ProxyTTFT
	}
	b.MedianProxyTTFT = Percentile(sortedCopy(col), .5)
	for i := range rows {
		p := &rows[i].Parts
		col[i] = rows[i].ProxyTTFT - p[stages.Gateway] - p[stages.Route]
	}
	b.MedianWindow = Percentile(sortedCopy(col), .5)
	for k, v := range engine {
		b.MedianEngine[k] = Percentile(sortedCopy(v), .5)
	}
	return b
}

// fmtMS formats a duration in milliseconds with a precision that suits it.
func fmtMS(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 0 && v > -10 || v >= 0 && v < 10:
		return fmt.Sprintf("%.2f", v)
	case v > -100 && v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
