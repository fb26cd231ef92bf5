package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Describe is a one-line account of a run's shape, for headings.
func (c *Config) Describe() string {
	var b strings.Builder
	if c.Rate > 0 {
		fmt.Fprintf(&b, "open loop %.4g req/s (Poisson)", c.Rate)
	} else {
		fmt.Fprintf(&b, "closed loop c=%d", max(c.Concurrency, 1))
	}
	if c.NoStream {
		b.WriteString(", not streamed")
	} else {
		b.WriteString(", streamed")
	}
	if c.Completions {
		b.WriteString(", completions")
	} else {
		b.WriteString(", chat")
	}
	if len(c.Prompts) > 0 {
		fmt.Fprintf(&b, ", %d prompts from file", len(c.Prompts))
	} else {
		fmt.Fprintf(&b, ", prompt %s tokens", c.PromptTokens)
	}
	fmt.Fprintf(&b, ", max_tokens %s", c.OutputTokens)
	return b.String()
}

// WriteText prints the summary as tables.
func (s *Summary) WriteText(w io.Writer, heading string) {
	if heading != "" {
		fmt.Fprintln(w, heading)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "requests\t%d\t\n", s.Requests)
	fmt.Fprintf(tw, "errors\t%d\t\n", s.Errors)
	fmt.Fprintf(tw, "elapsed\t%.2f s\t\n", s.Elapsed.Seconds())
	fmt.Fprintf(tw, "completed requests/s\t%.2f\t\n", s.RequestsPerSec)
	fmt.Fprintf(tw, "output tokens/s\t%.1f\t\n", s.OutputTokensPerSec)
	if s.MaxLag > time.Millisecond {
		fmt.Fprintf(tw, "latest start behind schedule\t%s ms\t\n", fmtMS(s.MaxLag))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if s.writeErrors(w, "") {
		fmt.Fprintln(w)
	}
	ttft, itl, e2e := s.WithTTFT > 0, s.Gaps > 0, s.Requests > 0
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ms\tp50\tp90\tp99\t\n")
	fmt.Fprintf(tw, "client TTFT\t%s\t%s\t%s\t\n", msOrNA(s.TTFT.P50, ttft), msOrNA(s.TTFT.P90, ttft), msOrNA(s.TTFT.P99, ttft))
	fmt.Fprintf(tw, "inter-token latency\t%s\t\t%s\t\n", msOrNA(s.ITL.P50, itl), msOrNA(s.ITL.P99, itl))
	fmt.Fprintf(tw, "time to completion\t%s\t\t%s\t\n", msOrNA(s.E2E.P50, e2e), msOrNA(s.E2E.P99, e2e))
	tw.Flush()
	if !ttft && s.Requests > 0 {
		fmt.Fprintf(w, "(no request got a first token: TTFT and inter-token latency are n/a)\n")
	} else if !itl && s.Requests > 0 {
		fmt.Fprintf(w, "(no request got a second token: inter-token latency is n/a)\n")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "end reasons:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range s.EndReasons {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%.1f%%\n", c.Reason, c.Detail, c.N, 100*c.Share)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if s.JoinNote != "" {
		fmt.Fprintln(w, "stage breakdown: "+s.JoinNote)
		return
	}
	b := s.Breakdown
	if b == nil {
		fmt.Fprintf(w, "stage breakdown: %s joined, none with a first token on both sides\n", plural(s.Joined, "record", "records"))
		return
	}
	fmt.Fprintf(w, "TTFT breakdown (%d of %s joined with the proxy's record; outside = client TTFT - proxy TTFT):\n", s.Joined, plural(s.Requests, "request", "requests"))
	b.WriteText(w)
	if b.Buffered > 0 {
		fmt.Fprintf(w, "%s flagged as buffered upstream of the proxy\n", plural(b.Buffered, "request was", "requests were"))
	}
}

// writeErrors prints the most common error texts, if any requests failed,
// after prefix on the heading line, and reports whether it printed.
func (s *Summary) writeErrors(w io.Writer, prefix string) bool {
	if len(s.TopErrors) == 0 {
		return false
	}
	head := "most common errors:"
	if s.ErrorKinds == 1 {
		head = "errors:"
	} else if s.ErrorKinds > len(s.TopErrors) {
		head = fmt.Sprintf("most common errors (%d of %d different):", len(s.TopErrors), s.ErrorKinds)
	}
	fmt.Fprintln(w, prefix+head)
	width := len(fmt.Sprint(s.TopErrors[0].N))
	for _, e := range s.TopErrors {
		fmt.Fprintf(w, "  %*d  %s\n", width, e.N, shorten(e.Text, 200))
	}
	return true
}

// shorten cuts text to at most n runes, marking the cut, and puts it on one
// line.
func shorten(text string, n int) string {
	text = strings.Join(strings.Fields(text), " ")
	if r := []rune(text); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return text
}

// msOrNA is fmtMS(d), or "n/a" when there is no value.
func msOrNA(d time.Duration, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmtMS(d)
}

// plural is "1 request" or "N requests": n and the fitting form.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// WriteText prints the breakdown table: the p50 and p99 requests (by
// client TTFT) and each part's median.
func (b *Breakdown) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ms\tp50 request\tp99 request\tmedian of stage\t\n")
	for p := range NumParts {
		name := Part(p).String()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, fmtMS(b.P50.Parts[p]), fmtMS(b.P99.Parts[p]), fmtMS(b.Median[p]))
	}
	fmt.Fprintf(tw, "= client TTFT\t%s\t%s\t%s\t\n", fmtMS(b.P50.ClientTTFT), fmtMS(b.P99.ClientTTFT), fmtMS(b.MedianClientTTFT))
	fmt.Fprintf(tw, "(proxy TTFT)\t%s\t%s\t%s\t\n", fmtMS(b.P50.ProxyTTFT), fmtMS(b.P99.ProxyTTFT), fmtMS(b.MedianProxyTTFT))
	tw.Flush()
}

// jsonMS is a duration written as milliseconds.
type jsonMS time.Duration

func (d jsonMS) MarshalJSON() ([]byte, error) {
	v := float64(d) / float64(time.Millisecond)
	return []byte(fmt.Sprintf("%.3f", math.Round(v*1000)/1000)), nil
}

// breakdownJSON is Breakdown in the --json output.
type breakdownJSON struct {
	N        int               `json:"requests"`
	P50      partsJSON         `json:"p50"`
	P99      partsJSON         `json:"p99"`
	Median   map[string]jsonMS `json:"median_ms"`
	Engine   map[string]jsonMS `json:"engine_median_ms,omitempty"`
	Buffered int               `json:"buffered"`
}

type partsJSON struct {
	ID         string            `json:"request_id"`
	ClientTTFT jsonMS            `json:"client_ttft_ms"`
	ProxyTTFT  jsonMS            `json:"proxy_ttft_ms"`
	Parts      map[string]jsonMS `json:"parts_ms"`
}

func partsOf(r RequestParts) partsJSON {
	out := partsJSON{ID: r.ID, ClientTTFT: jsonMS(r.ClientTTFT), ProxyTTFT: jsonMS(r.ProxyTTFT), Parts: map[string]jsonMS{}}
	for p := range NumParts {
		out.Parts[Part(p).String()] = jsonMS(r.Parts[p])
	}
	return out
}

// MarshalJSON writes the summary with durations in milliseconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	// A percentile over no values is null.
	type pcts struct {
		P50 *jsonMS `json:"p50"`
		P99 *jsonMS `json:"p99"`
	}
	type pcts3 struct {
		P50 *jsonMS `json:"p50"`
		P90 *jsonMS `json:"p90"`
		P99 *jsonMS `json:"p99"`
	}
	ms := func(d time.Duration, ok bool) *jsonMS {
		if !ok {
			return nil
		}
		v := jsonMS(d)
		return &v
	}
	ttft, itl, e2e := s.WithTTFT > 0, s.Gaps > 0, s.Requests > 0
	v := struct {
		Requests           int            `json:"requests"`
		Errors             int            `json:"errors"`
		ElapsedS           float64        `json:"elapsed_s"`
		RequestsPerSec     float64        `json:"requests_per_s"`
		OutputTokensPerSec float64        `json:"output_tokens_per_s"`
		WithTTFT           int            `json:"with_first_token"`
		TTFT               pcts3          `json:"client_ttft_ms"`
		ITL                pcts           `json:"inter_token_ms"`
		E2E                pcts           `json:"completion_ms"`
		MaxLag             jsonMS         `json:"max_start_lag_ms"`
		EndReasons         []Count        `json:"end_reasons"`
		TopErrors          []ErrorCount   `json:"top_errors"`
		ErrorKinds         int            `json:"error_kinds"`
		Joined             int            `json:"joined"`
		JoinNote           string         `json:"join_note,omitempty"`
		Breakdown          *breakdownJSON `json:"breakdown,omitempty"`
	}{
		Requests: s.Requests, Errors: s.Errors, ElapsedS: s.Elapsed.Seconds(),
		RequestsPerSec: s.RequestsPerSec, OutputTokensPerSec: s.OutputTokensPerSec,
		WithTTFT: s.WithTTFT,
		TTFT:     pcts3{ms(s.TTFT.P50, ttft), ms(s.TTFT.P90, ttft), ms(s.TTFT.P99, ttft)},
		ITL:      pcts{P50: ms(s.ITL.P50, itl), P99: ms(s.ITL.P99, itl)},
		E2E:      pcts{P50: ms(s.E2E.P50, e2e), P99: ms(s.E2E.P99, e2e)},
		MaxLag:   jsonMS(s.MaxLag), EndReasons: s.EndReasons, TopErrors: s.TopErrors, ErrorKinds: s.ErrorKinds,
		Joined: s.Joined, JoinNote: s.JoinNote,
	}
	if v.EndReasons == nil {
		v.EndReasons = []Count{}
	}
	if v.TopErrors == nil {
		v.TopErrors = []ErrorCount{}
	}
	if b := s.Breakdown; b != nil {
		v.Breakdown = &breakdownJSON{N: b.N, P50: partsOf(b.P50), P99: partsOf(b.P99), Median: map[string]jsonMS{}, Engine: map[string]jsonMS{}, Buffered: b.Buffered}
		for p := range NumParts {
			v.Breakdown.Median[Part(p).String()] = jsonMS(b.Median[p])
		}
		v.Breakdown.Median["client_ttft"] = jsonMS(b.MedianClientTTFT)
		v.Breakdown.Median["proxy_ttft"] = jsonMS(b.MedianProxyTTFT)
		for k, d := range b.MedianEngine {
			v.Breakdown.Engine[k] = jsonMS(d)
		}
	}
	return json.Marshal(v)
}

// SweepRow is one concurrency level of a sweep.
type SweepRow struct {
	Concurrency int     `json:"concurrency"`
	Summary     Summary `json:"summary"`
}

// WriteSweep prints throughput against responsiveness, one row per level.
func WriteSweep(w io.Writer, rows []SweepRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "concurrency\trequests\terrors\tcompleted/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tcompletion p50 ms\tcompletion p99 ms\toutside p50 ms\t\n")
	for _, r := range rows {
		s := &r.Summary
		out := "-"
		if s.Breakdown != nil {
			out = fmtMS(s.Breakdown.Median[Outside])
		}
		ttft, e2e := s.WithTTFT > 0, s.Requests > 0
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", r.Concurrency, s.Requests, s.Errors,
			s.RequestsPerSec, s.OutputTokensPerSec, msOrNA(s.TTFT.P50, ttft), msOrNA(s.TTFT.P99, ttft),
			msOrNA(s.E2E.P50, e2e), msOrNA(s.E2E.P99, e2e), out)
	}
	tw.Flush()
	for _, r := range rows {
		if len(r.Summary.TopErrors) > 0 {
			fmt.Fprintln(w)
			r.Summary.writeErrors(w, fmt.Sprintf("concurrency %d, ", r.Concurrency))
		}
	}
}
