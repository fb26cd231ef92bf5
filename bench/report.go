package bench

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// LogStats counts the lines ReadLog read.
type LogStats struct {
	Lines   int // non-blank lines
	Records int // request records kept
	// Other counts JSON lines that are not request records (operational
	// logs mixed in); Malformed lines that are not JSON or are broken
	// records. Both are skipped.
	Other, Malformed int
	// Logs is the number of logs read (ReadLog reads one; Add sums them).
	Logs int
}

// Add counts o's lines in s: the stats of several logs read as one.
func (s *LogStats) Add(o LogStats) {
	s.Lines += o.Lines
	s.Records += o.Records
	s.Other += o.Other
	s.Malformed += o.Malformed
	s.Logs += o.Logs
}

// maxLogLine bounds one log line.
const maxLogLine = 4 << 20

// ReadLog reads the proxy's JSON log lines (one record per line, as
// "ttftlens serve" writes them to stdout). Lines that are not request
// records are skipped and counted; only a read error is returned.
func ReadLog(r io.Reader) ([]Record, LogStats, error) {
	st := LogStats{Logs: 1}
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLogLine)
	for sc.Scan() {
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		st.Lines++
		rec, err := ParseRecord(b)
		if err != nil {
			if isJSONObject(b) && !looksLikeRecord(b) {
				st.Other++
			} else {
				st.Malformed++
			}
			continue
		}
		out = append(out, rec)
		st.Records++
	}
	return out, st, sc.Err()
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func isJSONObject(b []byte) bool {
	b = trimSpace(b)
	return len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}'
}

// looksLikeRecord reports a line that claims to be a request record.
func looksLikeRecord(b []byte) bool {
	var v struct {
		Msg       string `json:"msg"`
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(b, &v) != nil {
		return false
	}
	return v.Msg == "request" || v.RequestID != ""
}

// Group is the records of one route (path) and model.
type Group struct {
	Path, Model string
	Records     []Record
}

// GroupRecords groups records by path and model, largest group first.
func GroupRecords(recs []Record) []Group {
	idx := map[[2]string]int{}
	var out []Group
	for _, r := range recs {
		k := [2]string{r.Path, r.Model}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Group{Path: r.Path, Model: r.Model})
		}
		out[i].Records = append(out[i].Records, r)
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		return cmp.Or(len(b.Records)-len(a.Records), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// GroupReport is the figures of one group.
type GroupReport struct {
	Group
	// WithTTFT is how many got a first token; the percentiles are over them.
	WithTTFT int
	// StageP50, StageP95 are each stage's own percentiles; TTFT's are
	// TTFTP50, TTFTP95.
	StageP50, StageP95 [stages.NumStages]time.Duration
	TTFTP50, TTFTP95   time.Duration
	EndReasons         []Count
	Slow               *SlowReport // nil without a first token
}

// SlowReport is where the slowest 10% of a group's requests (by TTFT, at
// least one) spent their first token's time.
type SlowReport struct {
	N       int
	MinTTFT time.Duration // the fastest of them
	// Share is each stage's share of their summed TTFT; RestShare the
	// same over the other requests (zero when there are none).
	Share, RestShare [stages.NumStages]float64
	Dominant, Next   stages.Stage
	// DominantMean is the dominant stage's mean over the slow requests.
	DominantMean time.Duration
}

// Analyze computes a group's figures.
func Analyze(g Group) GroupReport {
	rep := GroupReport{Group: g}
	counts := map[[2]string]int{}
	var ttft []time.Duration
	var cols [stages.NumStages][]time.Duration
	var timed []Record
	for _, r := range g.Records {
		counts[[2]string{r.EndReason, r.EndDetail}]++
		if !r.HasTTFT {
			continue
		}
		timed = append(timed, r)
		ttft = append(ttft, r.TTFT)
		for s := range stages.NumStages {
			cols[s] = append(cols[s], r.Stages[s])
		}
	}
	for k, n := range counts {
		rep.EndReasons = append(rep.EndReasons, Count{Reason: k[0], Detail: k[1], N: n, Share: float64(n) / float64(len(g.Records))})
	}
	slices.SortFunc(rep.EndReasons, func(a, b Count) int {
		return cmp.Or(b.N-a.N, cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Detail, b.Detail))
	})
	rep.WithTTFT = len(timed)
	if len(timed) == 0 {
		return rep
	}
	ttft = sortedCopy(ttft)
	rep.TTFTP50, rep.TTFTP95 = Percentile(ttft, .5), Percentile(ttft, .95)
	for s := range stages.NumStages {
		c := sortedCopy(cols[s])
		rep.StageP50[s], rep.StageP95[s] = Percentile(c, .5), Percentile(c, .95)
	}
	slices.SortStableFunc(timed, func(a, b Record) int { return cmp.Compare(b.TTFT, a.TTFT) })
	n := max(1, (len(timed)+9)/10)
	slow, rest := timed[:n], timed[n:]
	sr := &SlowReport{N: n, MinTTFT: slow[n-1].TTFT}
	sr.Share = shares(slow)
	sr.RestShare = shares(rest)
	for s := range stages.NumStages {
		switch {
		case sr.Share[s] > sr.Share[sr.Dominant]:
			sr.Next, sr.Dominant = sr.Dominant, s
		case s != sr.Dominant && (sr.Next == sr.Dominant || sr.Share[s] > sr.Share[sr.Next]):
			sr.Next = s
		}
	}
	var sum time.Duration
	for _, r := range slow {
		sum += r.Stages[sr.Dominant]
	}
	sr.DominantMean = sum / time.Duration(n)
	rep.Slow = sr
	return rep
}

// shares is each stage's share of the records' summed TTFT.
func shares(recs []Record) [stages.NumStages]float64 {
	var out [stages.NumStages]float64
	var total time.Duration
	var sums [stages.NumStages]time.Duration
	for _, r := range recs {
		total += r.TTFT
		for s := range stages.NumStages {
			sums[s] += r.Stages[s]
		}
	}
	if total <= 0 {
		return out
	}
	for s := range stages.NumStages {
		out[s] = float64(sums[s]) / float64(total)
	}
	return out
}

// WriteReport prints each group's breakdown, end reasons and slow
// requests.
func WriteReport(w io.Writer, recs []Record, st LogStats) {
	fmt.Fprint(w, plural(st.Records, "request record", "request records"))
	if st.Logs > 1 {
		fmt.Fprintf(w, " from %d logs", st.Logs)
	}
	if st.Other+st.Malformed > 0 {
		fmt.Fprintf(w, " (skipped %s and %d malformed)", plural(st.Other, "other log line", "other log lines"), st.Malformed)
	}
	fmt.Fprintln(w)
	for _, g := range GroupRecords(recs) {
		rep := Analyze(g)
		model := g.Model
		if model == "" {
			model = "(none)"
		}
		fmt.Fprintf(w, "\n%s  model %s: %s, %d with a first token\n", g.Path, model, plural(len(g.Records), "request", "requests"), rep.WithTTFT)
		if rep.WithTTFT > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(tw, "  ms\tp50\tp95\t\n")
			for s := range stages.NumStages {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", s, fmtMS(rep.StageP50[s]), fmtMS(rep.StageP95[s]))
			}
			fmt.Fprintf(tw, "  TTFT\t%s\t%s\t\n", fmtMS(rep.TTFTP50), fmtMS(rep.TTFTP95))
			tw.Flush()
			fmt.Fprintln(w, "  (each stage's own percentile: they do not add up to TTFT's)")
		}
		fmt.Fprintln(w, "  end reasons:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, c := range rep.EndReasons {
			fmt.Fprintf(tw, "    %s\t%s\t%d\t%.1f%%\n", c.Reason, c.Detail, c.N, 100*c.Share)
		}
		tw.Flush()
		if sr := rep.Slow; sr != nil {
			fmt.Fprintf(w, "  slowest 10%% (%s, TTFT >= %s ms): %s holds %.0f%% of their TTFT (mean %s ms)",
				plural(sr.N, "request", "requests"), fmtMS(sr.MinTTFT), sr.Dominant, 100*sr.Share[sr.Dominant], fmtMS(sr.DominantMean))
			if sr.Next != sr.Dominant {
				fmt.Fprintf(w, ", %.0f points over the next, %s (%.0f%%)", 100*(sr.Share[sr.Dominant]-sr.Share[sr.Next]), sr.Next, 100*sr.Share[sr.Next])
			}
			if sr.N < rep.WithTTFT {
				fmt.Fprintf(w, "; %.0f%% in the other requests", 100*sr.RestShare[sr.Dominant])
			}
			fmt.Fprintln(w)
		}
	}
}
