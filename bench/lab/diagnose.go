package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttftlens/ttftlens/bench"
)

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v > -10 && v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func signed(d time.Duration) string {
	if d >= 0 {
		return "+" + ms(d)
	}
	return ms(d)
}

// Stage names the dominant part, with the engine duration inside it that
// grew the most when the part is split by the engine (preparation:
// tokenize or media; prefill: sync, rank synchronisation).
func (d *Diagnosis) Stage() string {
	name := d.Dominant.String()
	var sub []string
	switch name {
	case "preparation":
		sub = []string{"tokenize", "media"}
	case "prefill":
		sub = []string{"sync"}
	}
	best, bestD := "", time.Duration(0)
	for _, k := range sub {
		if v := d.EngineDeltas[k]; v > bestD && v > d.Deltas[d.Dominant]/2 {
			best, bestD = k, v
		}
	}
	if best != "" {
		return fmt.Sprintf("%s (engine %s %s ms)", name, best, signed(bestD))
	}
	return name
}

// WriteText prints the diagnosis in a few lines and the p50 breakdown
// before and after.
func (d *Diagnosis) WriteText(w io.Writer) {
	s := &d.Scenario
	bb, ib := d.Baseline.Breakdown, d.Injected.Breakdown
	fmt.Fprintf(w, "scenario %s: %s\n", s.Name, s.Cause)
	fmt.Fprintf(w, "  median client TTFT %s ms -> %s ms (%s ms), %d requests each\n",
		ms(bb.MedianClientTTFT), ms(ib.MedianClientTTFT), signed(d.Added), d.Injected.Requests)
	fmt.Fprintf(w, "  diagnosis: %s holds %.0f%% of the added time (%s ms)", d.Stage(), 100*d.Share, signed(d.Deltas[d.Dominant]))
	if d.Share > 1.05 {
		fmt.Fprintf(w, "; the other parts' medians moved by %s ms", signed(d.Added-d.Deltas[d.Dominant]))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  the proxy's own clock: the upstream window (routing to the first token handed out) moved %s ms\n", signed(d.WindowDelta))
	fmt.Fprintf(w, "  unattributed: %.1f%% of the injected TTFT", 100*d.Unattributed)
	if s.Unsplit {
		fmt.Fprint(w, " (expected here: the engine could not report this time)")
	}
	fmt.Fprintln(w)
	if d.Buffered > 0 || s.Buffered {
		fmt.Fprintf(w, "  buffered upstream: %d of %d records flagged (%s)\n", d.Buffered, d.Joined, strings.Join(d.Buffering, ", "))
	}
	if s.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", s.Note)
	}
	fmt.Fprintln(w, "  median of each part (ms):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "    \tbaseline\tinjected\tchange\t\n")
	for p := range bench.NumParts {
		mark := ""
		if bench.Part(p) == d.Dominant {
			mark = "  <--"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", bench.Part(p), ms(bb.Median[p]), ms(ib.Median[p]), signed(d.Deltas[p]), mark)
	}
	fmt.Fprintf(tw, "    client TTFT\t%s\t%s\t%s\t\n", ms(bb.MedianClientTTFT), ms(ib.MedianClientTTFT), signed(d.Added))
	tw.Flush()
}
