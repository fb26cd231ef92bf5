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
	fmt.Fprintf(tw, "requests/s\t%.2f\t\n", s.RequestsPerSec)
	fmt.Fprintf(tw, "output tokens/s\t%.1f\t\n", s.OutputTokensPerSec)
	if s.MaxLag > time.Millisecond {
		fmt.Fprintf(tw, "latest start behind schedule\t%s ms\t\n", fmtMS(s.MaxLag))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ms\tp50\tp90\tp99\t\n")
	fmt.Fprintf(tw, "client TTFT\t%s\t%s\t%s\t\n", fmtMS(s.TTFT.P50), fmtMS(s.TTFT.P90), fmtMS(s.TTFT.P99))
	fmt.Fprintf(tw, "inter-token latency\t%s\t\t%s\t\n", fmtMS(s.ITL.P50), fmtMS(s.ITL.P99))
	fmt.Fprintf(tw, "time to completion\t%s\t\t%s\t\n", fmtMS(s.E2E.P50), fmtMS(s.E2E.P99))
	tw.Flush()
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
		fmt.Fprintf(w, "stage breakdown: %d records joined, none with a first token on both sides\n", s.Joined)
		return
	}
	fmt.Fprintf(w, "TTFT breakdown (%d of %d requests joined with the proxy's record; outside = client TTFT - proxy TTFT):\n", s.Joined, s.Requests)
	b.WriteText(w)
	if b.Buffered > 0 {
		fmt.Fprintf(w, "%d requests were flagged as buffered upstream of the proxy\n", b.Buffered)
	}
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
	type pcts struct {
		P50 jsonMS  `json:"p50"`
		P90 *jsonMS `json:"p90,omitempty"`
		P99 jsonMS  `json:"p99"`
	}
	p90 := jsonMS(s.TTFT.P90)
	v := struct {
		Requests           int     `json:"requests"`
		Errors             int     `json:"errors"`
		ElapsedS           float64 `json:"elapsed_s"`
		RequestsPerSec     float64 `json:"requests_per_s"`
		OutputTokensPerSec float64 `json:"output_tokens_per_s"`
		TTFT               pcts    `json:"client_ttft_ms"`
		ITL                pcts    `json:"inter_token_ms"`
		E2E                pcts    `json:"completion_ms"`
		MaxLag             jsonMS  `json:"max_start_lag_ms"`
		EndReasons         []Count `json:"end_reasons"`
		Joined             int     `json:"joined"`
		JoinNote           string  `json:"join_note,omitempty"`
		Breakdown          *struct {
			N        int               `json:"requests"`
			P50      partsJSON         `json:"p50"`
			P99      partsJSON         `json:"p99"`
			Median   map[string]jsonMS `json:"median_ms"`
			Engine   map[string]jsonMS `json:"engine_median_ms,omitempty"`
			Buffered int               `json:"buffered"`
		} `json:"breakdown,omitempty"`
	}{
		Requests: s.Requests, Errors: s.Errors, ElapsedS: s.Elapsed.Seconds(),
		RequestsPerSec: s.RequestsPerSec, OutputTokensPerSec: s.OutputTokensPerSec,
		TTFT:   pcts{jsonMS(s.TTFT.P50), &p90, jsonMS(s.TTFT.P99)},
		ITL:    pcts{P50: jsonMS(s.ITL.P50), P99: jsonMS(s.ITL.P99)},
		E2E:    pcts{P50: jsonMS(s.E2E.P50), P99: jsonMS(s.E2E.P99)},
		MaxLag: jsonMS(s.MaxLag), EndReasons: s.EndReasons, Joined: s.Joined, JoinNote: s.JoinNote,
	}
	if v.EndReasons == nil {
		v.EndReasons = []Count{}
	}
	if b := s.Breakdown; b != nil {
		v.Breakdown = &struct {
			N        int               `json:"requests"`
			P50      partsJSON         `json:"p50"`
			P99      partsJSON         `json:"p99"`
			Median   map[string]jsonMS `json:"median_ms"`
			Engine   map[string]jsonMS `json:"engine_median_ms,omitempty"`
			Buffered int               `json:"buffered"`
		}{N: b.N, P50: partsOf(b.P50), P99: partsOf(b.P99), Median: map[string]jsonMS{}, Engine: map[string]jsonMS{}, Buffered: b.Buffered}
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
	fmt.Fprintf(tw, "concurrency\trequests\terrors\treq/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tcompletion p50 ms\tcompletion p99 ms\toutside p50 ms\t\n")
	for _, r := range rows {
		s := &r.Summary
		out := "-"
		if s.Breakdown != nil {
			out = fmtMS(s.Breakdown.Median[Outside])
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.2f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", r.Concurrency, s.Requests, s.Errors,
			s.RequestsPerSec, s.OutputTokensPerSec, fmtMS(s.TTFT.P50), fmtMS(s.TTFT.P99), fmtMS(s.E2E.P50), fmtMS(s.E2E.P99), out)
	}
	tw.Flush()
}
