package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// figure is one row of the table: how to compute a proxy's value and how
// to show it.
type figure struct {
	name  string
	value func(p run, before, after run, w workload) (float64, bool)
	unit  string
	prec  int
	ratio bool // a ratio of the two proxies means something
}

func eventsOf(p run) float64 { return float64(p.res.Events) }

var figures = []figure{
	{"added TTFT p50", func(p, b, a run, _ workload) (float64, bool) {
		return us(p.res.TTFTP50) - (us(b.res.TTFTP50)+us(a.res.TTFTP50))/2, p.res.OK > 0
	}, "µs", 0, true},
	{"proxy CPU per request", func(p, _, _ run, _ workload) (float64, bool) {
		return p.cpu.Seconds() * 1e6 / float64(p.res.Requests), p.res.Requests > 0
	}, "µs", 0, true},
	{"proxy CPU per event", func(p, _, _ run, _ workload) (float64, bool) {
		return p.cpu.Seconds() * 1e6 / eventsOf(p), p.res.Events > 0
	}, "µs", 1, true},
	{"proxy CPU per event in the kernel", func(p, _, _ run, _ workload) (float64, bool) {
		return p.kernelCPU.Seconds() * 1e6 / eventsOf(p), p.res.Events > 0
	}, "µs", 1, true},
	{"proxy CPU per event, every stream open", func(p, _, _ run, _ workload) (float64, bool) {
		return us(int64(p.phases.perEvent)), p.phases.ok
	}, "µs", 1, true},
	{"proxy CPU per stream start", func(p, _, _ run, _ workload) (float64, bool) {
		return us(int64(p.phases.perStart)), p.phases.ok
	}, "µs", 0, true},
	{"proxy syscalls per event", func(p, _, _ run, _ workload) (float64, bool) {
		return float64(p.perf.syscalls) / eventsOf(p), p.res.Events > 0 && p.perf.syscalls >= 0
	}, "", 2, true},
	{"proxy context switches per event", func(p, _, _ run, _ workload) (float64, bool) {
		return float64(p.perf.switches) / eventsOf(p), p.res.Events > 0 && p.perf.switches >= 0
	}, "", 2, true},
	{"added inter-token p99", func(p, b, a run, w workload) (float64, bool) {
		return ms(p.res.GapP99) - (ms(b.res.GapP99)+ms(a.res.GapP99))/2, w.cfg.Interval > 0 && p.res.OK > 0
	}, "ms", 2, false},
	{"RSS growth per open stream", func(p, _, _ run, w workload) (float64, bool) {
		return float64(p.plateau-p.idleKB) / float64(w.cfg.Requests), p.plateau > 0
	}, "KB", 1, true},
	{"peak RSS", func(p, _, _ run, w workload) (float64, bool) {
		return float64(p.peakKB) / 1024, w.cfg.Open
	}, "MB", 1, true},
	{"errors", func(p, _, _ run, _ workload) (float64, bool) {
		return float64(p.res.Errors), true
	}, "", 0, false},
}

func us(ns int64) float64 { return float64(ns) / 1e3 }
func ms(ns int64) float64 { return float64(ns) / 1e6 }

// print writes the results as Markdown, ready to paste into BENCHMARKS.md.
func (s *suite) print(out io.Writer) {
	under := "ttftlens " + s.ttftlensBin
	if s.built {
		rev, _ := exec.Command("git", "describe", "--always", "--dirty").Output()
		under = "ttftlens at " + strings.TrimSpace(string(rev))
	} else if v := binaryVersion(s.ttftlensBin); v != "" {
		under += " (" + v + ")"
	}
	if s.baseBin != "" {
		under += ", ttftlens-base " + s.baseBin
		if v := binaryVersion(s.baseBin); v != "" {
			under += " (" + v + ")"
		}
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Fprintf(out, "\n%s: `make scale SCALEFLAGS='%s'`, %s, %s, %s, %d CPUs, kernel %s\n\n",
		time.Now().UTC().Format("2006-01-02"), strings.Join(os.Args[1:], " "), under,
		nginxVersion(), runtime.Version(), runtime.NumCPU(), strings.TrimSpace(string(kernel)))
	printTables(out, s.names, s.rows)
}

// printTables writes the tables of rows, measured through names in order:
// the figures with their ratios, the knee's steps, the direct runs, and
// what the figures mean.
func printTables(out io.Writer, names []string, rows []workloadResult) {
	ratios := ratioColumns(names)
	fmt.Fprintf(out, "| workload | figure | %s |", strings.Join(names, " | "))
	for _, c := range ratios {
		fmt.Fprintf(out, " %s |", c.header)
	}
	fmt.Fprintf(out, "\n|%s\n", strings.Repeat(" --- |", 2+len(names)+len(ratios)))
	for _, r := range rows {
		if r.w.knee != nil {
			printKneeRow(out, r, ratios)
			continue
		}
		for _, f := range figures {
			vals, cells, ok := map[string]float64{}, make([]string, len(names)), false
			for i, name := range r.names {
				v, has := f.value(r.proxied[name], r.direct[i], r.direct[i+1], r.w)
				if has {
					vals[name], cells[i], ok = v, fmt.Sprintf("%.*f %s", f.prec, v, f.unit), true
				} else {
					cells[i] = "—"
				}
			}
			if !ok {
				continue
			}
			fmt.Fprintf(out, "| %s | %s | %s |", r.w.label, f.name, strings.TrimSpace(strings.ReplaceAll(strings.Join(cells, " | "), "  ", " ")))
			for _, c := range ratios {
				if head, base := vals[c.head], vals[c.base]; f.ratio && head > 0 && base > 0 {
					fmt.Fprintf(out, " %.2f |", head/base)
				} else {
					fmt.Fprintf(out, " — |")
				}
			}
			fmt.Fprintln(out)
		}
	}
	for _, r := range rows {
		if r.w.knee != nil {
			printKneeSteps(out, r)
		}
	}
	header := "\nDirect runs (client to upstream, no proxy), the baselines:\n\n| workload | direct runs | TTFT p50 | inter-token p99 | errors |\n| --- | --- | --- | --- | --- |\n"
	for _, r := range rows {
		if r.w.knee != nil {
			continue // its direct runs are in its steps
		}
		fmt.Fprint(out, header)
		header = ""
		var ttft, gap []string
		errs := 0
		for _, d := range r.direct {
			ttft = append(ttft, fmt.Sprintf("%.0f µs", us(d.res.TTFTP50)))
			gap = append(gap, fmt.Sprintf("%.2f ms", ms(d.res.GapP99)))
			errs += d.res.Errors
		}
		fmt.Fprintf(out, "| %s | %d | %s | %s | %d |\n", r.w.label, len(r.direct), strings.Join(ttft, ", "), strings.Join(gap, ", "), errs)
	}
	fmt.Fprint(out, definitions)
}

// kneeFigure is the knee's row in the table of figures.
const kneeFigure = "the knee: stream starts per second with added TTFT p99 ≤ 10 ms"

// printKneeRow writes the knee of each proxy's ramp, and their ratios.
func printKneeRow(out io.Writer, r workloadResult, ratios []ratioColumn) {
	knees := map[string]kneeResult{}
	fmt.Fprintf(out, "| %s | %s |", r.w.label, kneeFigure)
	for _, name := range r.names {
		knees[name] = r.w.knee.kneeOf(r.ramps[name])
		fmt.Fprintf(out, " %s |", knees[name])
	}
	for _, c := range ratios {
		fmt.Fprintf(out, " %s |", kneeRatio(knees[c.head], knees[c.base]))
	}
	fmt.Fprintln(out)
}

// printKneeSteps writes the knee's curve: every step of every ramp, by
// rate.
func printKneeSteps(out io.Writer, r workloadResult) {
	fmt.Fprintf(out, "\nThe knee, step by step (%s):\n\n", r.w.label)
	fmt.Fprintf(out, "| proxy | streams per second | added TTFT p50 | added TTFT p99 | direct TTFT p99 | proxy CPU | verdict |\n")
	fmt.Fprintf(out, "|%s\n", strings.Repeat(" --- |", 7))
	for _, name := range r.names {
		steps := slices.Clone(r.ramps[name])
		slices.SortStableFunc(steps, func(a, b kneeStep) int { return a.rate - b.rate })
		for _, st := range steps {
			fmt.Fprintf(out, "| %s | %s | %.2f ms | %.2f ms | %.2f ms | %.0f%% | %s |\n", name, thousands(st.rate),
				ms(int64(st.added(50))), ms(int64(st.added(99))), ms(st.direct.ConnTTFTP99), st.cpuShare()*100, r.w.knee.verdictText(st))
		}
	}
}

const definitions = `
- Added TTFT p50: the proxied run's median time to first token (request
  written to the first event read, at the client) minus the mean of the
  medians of the direct runs before and after it.
- Proxy CPU: the proxy process's utime + stime (/proc/PID/stat, every
  thread) over the measured run, divided by its requests, or by the token
  events the client received; "in the kernel" is the stime part alone.
- Proxy CPU by phase (open streams): CPU is also sampled every 50 ms.
  "Every stream open" is the CPU between the first and the last sample
  taken from the last stream's first event to the first stream's end,
  divided by the token events the client received meanwhile. "Per stream
  start" is the CPU from the run's start to that first sample, less the
  events received meanwhile at the open streams' CPU per event, divided by
  the streams: accepting, dialing, the request, the first event.
- Syscalls and context switches per event: every system call the proxy's
  threads made during the run (perf stat, raw_syscalls:sys_enter), and
  every time one of them was switched out (context-switches), per token
  event.
- Added inter-token p99: per event after a stream's first, the client's
  arrival gap minus the upstream's send gap for the same two events (the
  delay the path added to that event over the one before); its p99 over
  every event of the run, minus the mean of the same p99 in the direct runs
  before and after.
- RSS growth per open stream: the proxy's VmRSS, median of 50 ms samples
  while every stream is open (from the last stream's first event to the
  first stream's end), minus its VmRSS idle before the run (after a
  warm-up), divided by the streams. Peak RSS: VmHWM at the run's end.
- The knee (new streams): a ramp of rates, each held for its step, once
  directly and once through the proxy (one process for the ramp). Every
  stream is a new connection; its TTFT runs from the dial to its first
  event; added TTFT at a rate is the proxied run's percentile minus the
  direct run's at the same rate. Rates grow by 1.25× until a step fails,
  then two bisections between the last rate that passed and the first that
  failed. A step fails when added TTFT p99 passes 10 ms or a stream fails;
  it is the rig's limit, not the proxy's, when directly a stream failed or
  TTFT p99 passed 10 ms, or when the client started its streams more than
  5% of the step behind schedule. The knee is the highest rate that passed
  below the first that failed; "≥" when the ramp ended at its top or at
  the rig's limit. Proxy CPU is its CPU time over the proxied run's wall
  time, a share of its one core.
- ratio is ttftlens over nginx; base→head is ttftlens over ttftlens-base,
  a second ttftlens binary (-ttftlens-base), each figure measured the same
  way, right after ttftlens.
- Each proxy run is a fresh process; nginx runs one process (the worker,
  master_process off) with proxy_buffering off and upstream keep-alive;
  ttftlens runs serve with its defaults, but no connection caps (every
  client connects from 127.0.0.1). Both write one access-log line per
  request to a file.
`
