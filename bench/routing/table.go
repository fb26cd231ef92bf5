package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/stages"
)

// report is what a run prints.
type report struct {
	// heading says when and how the run was made (date, command, Go, CPUs).
	heading string
	// engines says how the engines were set up; labels name them.
	engines string
	labels  []string
	// systemTokens are the system prompts' sizes in tokens.
	systemTokens []int
	// rate is the arrival rate; capacity and clients, when capacity is
	// positive, the calibration it came from, and load its fraction of it.
	rate, capacity, load float64
	clients              int
	calibrate            time.Duration
	duration             time.Duration
	seed                 uint64
	results              []policyResult
	// held is least_ttft's run held to a TTFT SLO (nil: none ran).
	held *policyResult
}

// write prints the report as Markdown, ready to paste into BENCHMARKS.md.
func (r *report) write(w io.Writer) {
	fmt.Fprintf(w, "%s\n\n", r.heading)
	fmt.Fprintf(w, "%s; %d system prompts of %s tokens, %d users, %s.\n",
		r.engines, len(r.systemTokens), joinInts(r.systemTokens, ", "), numUsers, r.arrivals())
	if len(r.results) == 0 {
		fmt.Fprintln(w, "\nNo policy ran.")
		return
	}
	best := r.best()
	predicted := false
	for _, res := range r.results {
		predicted = predicted || res.policy == gateway.PolicyLeastTTFT
	}
	fmt.Fprintf(w, "\n| policy | requests (errors) | TTFT p50 | TTFT p99 | prefix-cache hit share | the stage that grew (median, against %s) | requests per engine (%s) |",
		r.results[best].policy, strings.Join(r.labels, " / "))
	cols := 7
	if predicted {
		fmt.Fprint(w, " prediction error p50 / p90 |")
		cols++
	}
	fmt.Fprintf(w, "\n|%s\n", strings.Repeat(" --- |", cols))
	for i := range r.results {
		res := &r.results[i]
		fmt.Fprintf(w, "| `%s` | %d (%d) | %s | %s | %.1f %% | %s | %s |", res.policy, res.requests, res.errors,
			ms(res.ttftP50), ms(res.ttftP99), 100*res.hitShare(), r.grew(i, best), joinInts(res.perEngine, " / "))
		if predicted {
			fmt.Fprintf(w, " %s |", predictionError(res))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "\nThe median of each stage, from the proxy's records:\n\n| policy | records |")
	for s := range stages.NumStages {
		fmt.Fprintf(w, " %s |", stages.Stage(s))
	}
	fmt.Fprintf(w, "\n|%s\n", strings.Repeat(" --- |", 2+int(stages.NumStages)))
	for _, res := range r.results {
		fmt.Fprintf(w, "| `%s` | %d |", res.policy, res.split)
		for s := range stages.NumStages {
			fmt.Fprintf(w, " %s |", ms(res.stageMedian[s]))
		}
		fmt.Fprintln(w)
	}
	r.writeStageErrors(w)
	r.writeHeld(w)
	fmt.Fprint(w, definitions)
	if predicted {
		fmt.Fprintln(w, "- Prediction error: |predicted − measured| / measured TTFT, from the records'\n  `predicted_ttft_ms` and `ttft_ms`, over those routed with a prediction.")
	}
	if r.held != nil {
		fmt.Fprint(w, heldDefinitions)
	}
}

// writeHeld prints the run held to a TTFT SLO, if one ran.
func (r *report) writeHeld(w io.Writer) {
	h := r.held
	if h == nil {
		return
	}
	fmt.Fprintf(w, "\n`%s` held to a TTFT SLO of %s (the route's `ttft_slo`):\n\n", h.policy, ms(h.slo))
	fmt.Fprintf(w, "| requests | refused (429) | TTFT p50 | TTFT p99 | prediction error p50 / p90 |")
	for _, l := range r.labels {
		fmt.Fprintf(w, " engine %s: served, past the SLO, the latest; not on a prediction, past the SLO |", l)
	}
	fmt.Fprintf(w, "\n|%s\n", strings.Repeat(" --- |", 5+len(r.labels)))
	fmt.Fprintf(w, "| %d | %d | %s | %s | %s |", h.requests, h.refused, ms(h.ttftP50), ms(h.ttftP99), predictionError(h))
	for e := range r.labels {
		if e >= len(h.perEngine) {
			fmt.Fprint(w, " — |")
			continue
		}
		latest := "—"
		if h.sloMissed[e] > 0 {
			latest = fmt.Sprintf("+%.0f %%", 100*h.worstMiss[e])
		}
		fmt.Fprintf(w, " %d, %d, %s; %d, %d |", h.perEngine[e], h.sloMissed[e], latest, h.unpredicted[e], h.unpredictedMissed[e])
	}
	fmt.Fprintln(w)
}

// writeStageErrors prints where the predictions were off, for the runs
// that predicted.
func (r *report) writeStageErrors(w io.Writer) {
	runs := make([]*policyResult, 0, len(r.results)+1)
	for i := range r.results {
		if r.results[i].predicted > 0 {
			runs = append(runs, &r.results[i])
		}
	}
	if r.held != nil && r.held.predicted > 0 {
		runs = append(runs, r.held)
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprint(w, "\nWhere the predictions were off: per stage, the median of |predicted − measured| over the measured TTFT:\n\n| policy | predicted |")
	for s := stages.Queue; s < stages.NumStages; s++ {
		fmt.Fprintf(w, " %s |", s)
	}
	fmt.Fprintf(w, "\n|%s\n", strings.Repeat(" --- |", 2+int(stages.NumStages-stages.Queue)))
	for _, res := range runs {
		fmt.Fprintf(w, "| %s | %d |", runName(res), res.predicted)
		for s := stages.Queue; s < stages.NumStages; s++ {
			fmt.Fprintf(w, " %.1f %% |", 100*res.stageErr[s])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "\nWhether the prefix was predicted cached (`cached_tokens_expected` above 0), against whether the engine served most of the prompt from its cache: requests, and their prediction error p50:\n\n"+
		"| policy | predicted cached, was | predicted cached, was not | predicted computed, was cached | predicted computed, was |\n| --- | --- | --- | --- | --- |\n")
	for _, res := range runs {
		fmt.Fprintf(w, "| %s |", runName(res))
		for _, c := range [...]cacheCell{res.cache[1][1], res.cache[1][0], res.cache[0][1], res.cache[0][0]} {
			if c.n == 0 {
				fmt.Fprint(w, " 0 |")
				continue
			}
			fmt.Fprintf(w, " %d, %.0f %% |", c.n, 100*c.errP50)
		}
		fmt.Fprintln(w)
	}
}

// runName names a run in a table: its policy, and its SLO if it had one.
func runName(res *policyResult) string {
	name := "`" + res.policy + "`"
	if res.slo > 0 {
		name += " held to " + ms(res.slo)
	}
	return name
}

// predictionError is a result's prediction error p50 / p90, — without
// predictions.
func predictionError(res *policyResult) string {
	if res.predicted == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f %% / %.0f %%", 100*res.errP50, 100*res.errP90)
}

// arrivals says how the requests arrived.
func (r *report) arrivals() string {
	s := fmt.Sprintf("open-loop Poisson arrivals at %.2f requests/s", r.rate)
	if r.capacity > 0 {
		s += fmt.Sprintf(" (%.2f of the %.2f/s a closed loop of %d clients completed under `least_request` in the last two thirds of %s)",
			r.load, r.capacity, r.clients, r.calibrate)
	}
	return s + fmt.Sprintf(", %s per policy, seed %d", r.duration, r.seed)
}

// best is the index of the result with the lowest TTFT p99 among those
// with a complete request.
func (r *report) best() int {
	b := 0
	for i, res := range r.results {
		if res.requests > res.errors && (r.results[b].requests == r.results[b].errors || res.ttftP99 < r.results[b].ttftP99) {
			b = i
		}
	}
	return b
}

// grew names the stage whose median grew most in result i against the
// best result's, with by how much.
func (r *report) grew(i, best int) string {
	if i == best {
		return "— (lowest p99)"
	}
	res, base := &r.results[i], &r.results[best]
	if res.split == 0 || base.split == 0 {
		return "—"
	}
	top, by := stages.Stage(0), time.Duration(0)
	for s := range stages.NumStages {
		if d := res.stageMedian[s] - base.stageMedian[s]; d > by {
			top, by = s, d
		}
	}
	if by == 0 {
		return "none"
	}
	return fmt.Sprintf("%s +%s", top, ms(by))
}

// ms renders d in milliseconds, with three significant figures or so.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, sep)
}

// definitions say what the columns hold.
const definitions = `
- TTFT: measured by the client, from each request's scheduled start (open
  loop: a late start counts) to its first content event, over the complete
  requests.
- Prefix-cache hit share: the prompt tokens the engines served from their
  prefix cache over all prompt tokens, by the engines' own count of each
  measured request.
- The stage that grew: the stage whose median, over the proxy's records,
  grew most against the policy with the lowest TTFT p99.
- Requests per engine: the records routed to each.
`

// heldDefinitions say what the SLO run's columns hold.
const heldDefinitions = `- Held to a TTFT SLO: refused, the requests answered 429 because no
  upstream was predicted to meet the SLO; per engine, the requests it
  served, those routed with a prediction whose TTFT (the proxy's) passed
  the SLO, and the latest of them by how much, a share of the SLO:
  against the prediction error p90 (over the requests routed on a
  prediction); then those routed not on a prediction: without one (a
  cold model refuses nothing, and affinity chooses while no model
  predicts) or as probes past the SLO, of models measured long ago (10 s
  or more: docs/routing.md, "TTFT SLOs"); and how many of them passed
  the SLO.
`
