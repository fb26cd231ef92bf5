package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
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
	}
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Fprintf(out, "\n%s: `make scale SCALEFLAGS='%s'`, %s, %s, %s, %d CPUs, kernel %s\n\n",
		time.Now().UTC().Format("2006-01-02"), strings.Join(os.Args[1:], " "), under,
		nginxVersion(), runtime.Version(), runtime.NumCPU(), strings.TrimSpace(string(kernel)))
	names := strings.Split(s.proxies, ",")
	fmt.Fprintf(out, "| workload | figure | %s |", strings.Join(names, " | "))
	if len(names) == 2 {
		fmt.Fprintf(out, " ratio |")
	}
	fmt.Fprintf(out, "\n|%s\n", strings.Repeat(" --- |", 2+len(names)+boolInt(len(names) == 2)))
	for _, r := range s.rows {
		for _, f := range figures {
			vals, cells, ok := make([]float64, len(names)), make([]string, len(names)), false
			for i, name := range r.names {
				v, has := f.value(r.proxied[name], r.direct[i], r.direct[i+1], r.w)
				if has {
					vals[i], cells[i], ok = v, fmt.Sprintf("%.*f %s", f.prec, v, f.unit), true
				} else {
					cells[i] = "—"
				}
			}
			if !ok {
				continue
			}
			fmt.Fprintf(out, "| %s | %s | %s |", r.w.label, f.name, strings.TrimSpace(strings.ReplaceAll(strings.Join(cells, " | "), "  ", " ")))
			if len(names) == 2 {
				if f.ratio && vals[0] > 0 && vals[1] > 0 {
					fmt.Fprintf(out, " %.2f |", vals[1]/vals[0])
				} else {
					fmt.Fprintf(out, " — |")
				}
			}
			fmt.Fprintln(out)
		}
	}
	fmt.Fprintf(out, "\nDirect runs (client to upstream, no proxy), the baselines:\n\n| workload | direct runs | TTFT p50 | inter-token p99 | errors |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range s.rows {
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

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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
- Each proxy run is a fresh process; nginx runs one process (the worker,
  master_process off) with proxy_buffering off and upstream keep-alive;
  ttftlens runs serve with its defaults, but no connection caps (every
  client connects from 127.0.0.1). Both write one access-log line per
  request to a file.
`
