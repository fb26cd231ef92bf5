// Command scale measures what ttftlens costs at scale against nginx: CPU
// per request and per event, system calls per event, added time to first
// token and inter-token delay, memory per open stream. `make scale` runs it
// from the repository's root.
//
// It builds ttftlens, starts a zero-compute SSE upstream (this program in
// its upstream mode), and for each workload runs the client (its client
// mode) directly against the upstream, through nginx (one worker,
// proxy_buffering off), directly again, through ttftlens serve, and
// directly once more: each proxy run has a direct run before and after it,
// whose mean is its baseline. The knee workload instead runs directly and
// through the proxy at each rate of a ramp (knee.go). The proxy under test
// runs on CPU 0; the client and the upstream share CPU 1. Each proxy run
// (each ramp) gets a fresh process. With -ttftlens-base, a second ttftlens
// binary is measured right after the first, for a change's before and
// after beside nginx in one run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/internal/sock"
)

func main() {
	mode := flag.String("mode", "suite", "suite, or (run by the suite) upstream or client")
	listen := flag.String("listen", "127.0.0.1:0", "upstream mode: address")
	var cc clientConfig
	flag.StringVar(&cc.Addr, "addr", "", "client mode: the server's address")
	flag.IntVar(&cc.Tokens, "tokens", 16, "client mode: tokens per request")
	flag.DurationVar(&cc.Interval, "interval", 0, "client mode: time between tokens")
	flag.IntVar(&cc.Requests, "requests", 100, "client mode: requests (streams)")
	flag.IntVar(&cc.Conc, "conc", 1, "client mode: closed-loop workers (without -open)")
	flag.BoolVar(&cc.Open, "open", false, "client mode: every request its own connection, all open at once, their starts spread over -ramp")
	flag.DurationVar(&cc.Ramp, "ramp", time.Second, "client mode: with -open, the time over which the streams start")
	flag.BoolVar(&cc.Reset, "reset", false, "client mode: close each connection with a reset (SO_LINGER 0), leaving no TIME_WAIT")
	var s suite
	flag.StringVar(&s.workloads, "workloads", "c1,c64,s1000,s8000,knee", "workloads to run: c1 (one client, 16 tokens), c64 (64 clients, 64 tokens), s1000 (many streams, 50 tokens 100 ms apart), s8000 (more streams, tokens 1 s apart), knee (a ramp of new streams per second up to added TTFT p99 over 10 ms)")
	flag.StringVar(&s.proxies, "proxies", "nginx,ttftlens", "proxies to measure, in this order: nginx, ttftlens, ttftlens-base (with -ttftlens-base, added right after ttftlens unless placed here)")
	flag.BoolVar(&s.quick, "quick", false, "a tenth of every size, the knee three steps of 300 ms (a check that the suite works, not figures)")
	flag.IntVar(&s.c1Requests, "c1-requests", 3000, "c1: requests")
	flag.IntVar(&s.c64Requests, "c64-requests", 10000, "c64: requests")
	flag.IntVar(&s.s1000Streams, "s1000-streams", 1000, "s1000: streams")
	flag.IntVar(&s.s8000Streams, "s8000-streams", 8000, "s8000: streams")
	flag.IntVar(&s.s8000Tokens, "s8000-tokens", 20, "s8000: tokens per stream, 1 s apart")
	flag.IntVar(&s.kneeStart, "knee-start", 250, "knee: the first rate, new streams per second")
	flag.IntVar(&s.kneeTop, "knee-top", 8000, "knee: the highest rate (capped where a step's streams would pass the file limit)")
	flag.DurationVar(&s.kneeStep, "knee-step", 2*time.Second, "knee: how long each rate is held, directly and through the proxy")
	flag.StringVar(&s.ttftlensBin, "ttftlens", "", "a prebuilt ttftlens binary to measure as ttftlens (default: go build ./cmd/ttftlens from this checkout, into the working directory)")
	flag.StringVar(&s.baseBin, "ttftlens-base", "", "a second prebuilt ttftlens binary (the before of a change: see above), measured as ttftlens-base right after ttftlens in every workload, with a base→head ratio column")
	flag.StringVar(&s.ttftlensFlags, "ttftlens-flags", "", "more flags for ttftlens serve (both binaries), space-separated")
	flag.BoolVar(&s.keep, "keep", false, "keep the working directory (logs, configs)")
	flag.BoolVar(&s.countSyscalls, "count-syscalls", true, "count the proxy's system calls and context switches during its run (perf stat; adds a little to every call; not in the knee)")
	flag.Usage = usage
	flag.Parse()
	switch *mode {
	case "upstream":
		upstreamMain(*listen)
	case "client":
		clientMain(cc)
	case "suite":
		if err := s.run(); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "scale: unknown -mode", *mode)
		os.Exit(2)
	}
}

// usage is -h: how the binaries under test come to be, then the flags.
func usage() {
	fmt.Fprint(flag.CommandLine.Output(), `Usage: go run ./bench/scale [flags]   (make scale SCALEFLAGS='flags')

Measures ttftlens against nginx at scale and prints a Markdown table.
Needs Linux, 2 CPUs or more, nginx and perf (make scale installs them).

The ttftlens measured is built from this checkout (go build ./cmd/ttftlens,
run from the repository's root) unless -ttftlens names a prebuilt binary.
To compare a change's before and after beside nginx in one run, build the
before in another checkout and pass it as -ttftlens-base; it is measured
right after ttftlens in every workload, with a base→head ratio column:

  git worktree add --detach /tmp/base main   # the commit before the change
  make -C /tmp/base build                    # /tmp/base/bin/ttftlens, version stamped
  go run ./bench/scale -ttftlens-base /tmp/base/bin/ttftlens

A prebuilt binary is named in the table with what it says of itself
(ttftlens version): make build stamps its version and commit.

Flags:
`)
	flag.PrintDefaults()
}

// suite is the whole benchmark.
type suite struct {
	workloads, proxies         string
	names                      []string // the proxies, in order (proxyList)
	quick, keep, countSyscalls bool
	built                      bool // ttftlens was built from this checkout
	c1Requests, c64Requests    int
	s1000Streams, s8000Streams int
	s8000Tokens                int
	kneeStart, kneeTop         int
	kneeStep                   time.Duration
	ttftlensBin, ttftlensFlags string
	baseBin                    string // -ttftlens-base, "" for none
	dir, self, upstream        string
	fileLimit                  uint64
	rows                       []workloadResult
}

// workload is one load shape.
type workload struct {
	name  string
	label string
	cfg   clientConfig
	knee  *kneePlan // the knee workload's ramp; nil for the others
}

// run is one client run and, for a proxy run, what the proxy spent on it.
type run struct {
	res       clientResult
	proxy     bool
	cpu       time.Duration
	kernelCPU time.Duration // of cpu, in the kernel (stime)
	perf      perfCounts
	idleKB    int64
	plateau   int64 // KiB, 0 when not measured
	phases    phaseCPU
	peakKB    int64
	proxyPID  int
}

type workloadResult struct {
	w       workload
	direct  []run                 // before the first proxy, then after each
	proxied map[string]run        // by proxy name
	ramps   map[string][]kneeStep // the knee workload's, by proxy name
	names   []string
}

func (s *suite) workloadList() ([]workload, error) {
	scale := func(n int) int {
		if s.quick {
			return max(n/10, 1)
		}
		return n
	}
	// The knee: ×1.25 a step (the knee within 25%, two bisections bring
	// it within 6%); -quick doubles from the start to 4× it, 300 ms each.
	knee := kneePlan{start: s.kneeStart, top: s.kneeTop, factor: 1.25, refine: 2, step: s.kneeStep}
	if s.quick {
		knee = kneePlan{start: s.kneeStart, top: 4 * s.kneeStart, factor: 2, step: 300 * time.Millisecond}
	}
	all := map[string]workload{
		"c1":    {"c1", "c=1, 16 tokens", clientConfig{Tokens: 16, Requests: scale(s.c1Requests), Conc: 1}, nil},
		"c64":   {"c64", "c=64, 64 tokens", clientConfig{Tokens: 64, Requests: scale(s.c64Requests), Conc: 64}, nil},
		"s1000": {"s1000", "", clientConfig{Tokens: 50, Interval: 100 * time.Millisecond, Requests: scale(s.s1000Streams), Open: true, Ramp: time.Second}, nil},
		"s8000": {"s8000", "", clientConfig{Tokens: s.s8000Tokens, Interval: time.Second, Requests: scale(s.s8000Streams), Open: true, Ramp: 4 * time.Second}, nil},
		"knee":  {"knee", "", kneeStream, &knee},
	}
	if s.quick {
		w := all["s8000"]
		w.cfg.Tokens = max(w.cfg.Tokens/2, 6)
		all["s8000"] = w
	}
	var out []workload
	for name := range strings.SplitSeq(s.workloads, ",") {
		w, ok := all[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-workloads: unknown %q", name)
		}
		// A proxied stream holds two sockets in the proxy.
		most := int((s.fileLimit - 200) / 2)
		switch {
		case w.knee != nil:
			if w.knee.step <= 0 {
				return nil, fmt.Errorf("%s: a step of %s", w.name, w.knee.step)
			}
			if top := int(float64(most) / w.knee.step.Seconds()); w.knee.top > top {
				fmt.Printf("# %s: top rate %d capped to %d: a step's streams may all be open at once, a proxied stream holds two sockets and the file limit is %d\n", w.name, w.knee.top, top, s.fileLimit)
				w.knee.top = top
			}
			if w.knee.start < 1 || w.knee.start > w.knee.top {
				return nil, fmt.Errorf("%s: the first rate %d is not between 1 and the top, %d", w.name, w.knee.start, w.knee.top)
			}
			w.label = fmt.Sprintf("new streams, %d tokens %s apart, %s per rate", w.cfg.Tokens, spaced(w.cfg.Interval), spaced(w.knee.step))
		case w.cfg.Open:
			if w.cfg.Requests > most {
				fmt.Printf("# %s: %d streams capped to %d: a proxied stream holds two sockets and the file limit is %d\n", w.name, w.cfg.Requests, most, s.fileLimit)
				w.cfg.Requests = most
			}
			w.label = fmt.Sprintf("%s streams, %d tokens %s apart, started over %s", thousands(w.cfg.Requests), w.cfg.Tokens, spaced(w.cfg.Interval), spaced(w.cfg.Ramp))
			if w.cfg.Tokens*int(w.cfg.Interval) <= int(w.cfg.Ramp) {
				return nil, fmt.Errorf("%s: %d tokens %s apart end before the last stream starts (ramp %s): no plateau", w.name, w.cfg.Tokens, w.cfg.Interval, w.cfg.Ramp)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func (s *suite) run() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("needs Linux (/proc, taskset)")
	}
	was, limit, err := sock.RaiseFileLimit()
	if err != nil {
		return err
	}
	fmt.Printf("# RLIMIT_NOFILE: soft limit raised from %d to the hard limit, %d\n", was, limit)
	s.fileLimit = limit
	if s.names, err = proxyList(s.proxies, s.baseBin != ""); err != nil {
		return err
	}
	works, err := s.workloadList()
	if err != nil {
		return err
	}
	if slices.Contains(s.names, nginx) {
		if err := need("nginx", "nginx"); err != nil {
			return err
		}
	}
	for _, bin := range []string{s.ttftlensBin, s.baseBin} {
		if bin == "" {
			continue
		}
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("a prebuilt ttftlens: %w", err)
		}
	}
	if s.countSyscalls {
		if err := need("perf", "linux-perf"); err != nil {
			return err
		}
	}
	if s.dir, err = os.MkdirTemp("", "ttftlens-scale-"); err != nil {
		return err
	}
	if s.keep {
		fmt.Println("# working directory", s.dir)
	} else {
		defer os.RemoveAll(s.dir)
	}
	if s.self, err = os.Executable(); err != nil {
		return err
	}
	if s.ttftlensBin == "" {
		s.ttftlensBin, s.built = filepath.Join(s.dir, "ttftlens"), true
		fmt.Println("# building ttftlens")
		build := exec.Command("go", "build", "-o", s.ttftlensBin, "./cmd/ttftlens")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/ttftlens (run from the repository's root): %w", err)
		}
	}
	up, err := start(s.dir, "upstream", 1, nil, s.self, "-mode", "upstream")
	if err != nil {
		return err
	}
	defer up.stop()
	if s.upstream, err = readFirstLine(filepath.Join(s.dir, "upstream.out"), up); err != nil {
		return err
	}
	fmt.Printf("# upstream on %s (CPU 1), client on CPU 1, proxy under test on CPU 0\n", s.upstream)
	for _, w := range works {
		run := s.runWorkload
		if w.knee != nil {
			run = s.runKnee
		}
		r, err := run(w)
		if err != nil {
			return err
		}
		s.rows = append(s.rows, r)
	}
	s.print(os.Stdout)
	return nil
}

func (s *suite) runWorkload(w workload) (workloadResult, error) {
	r := workloadResult{w: w, proxied: map[string]run{}}
	fmt.Printf("== %s\n", w.label)
	d, err := s.direct(w)
	if err != nil {
		return r, err
	}
	r.direct = append(r.direct, d)
	for _, name := range s.names {
		p, err := s.proxied(w, name)
		if err != nil {
			return r, err
		}
		r.proxied[name] = p
		r.names = append(r.names, name)
		if d, err = s.direct(w); err != nil {
			return r, err
		}
		r.direct = append(r.direct, d)
	}
	return r, nil
}

func (s *suite) direct(w workload) (run, error) {
	fmt.Printf("  direct\n")
	res, err := s.client(w.cfg, s.upstream)
	return run{res: res}, err
}

// proxied starts a fresh proxy, warms it up, and measures one client run
// through it.
func (s *suite) proxied(w workload, name string) (run, error) {
	p, addr, err := s.startProxy(name)
	if err != nil {
		return run{}, err
	}
	defer p.stop()
	pid := p.pid()
	r := run{proxy: true, proxyPID: pid}
	if r.idleKB, err = memKB(pid, "VmRSS"); err != nil {
		return r, err
	}
	before, err := readUsage(pid)
	if err != nil {
		return r, err
	}
	sampler := sampleProc(pid)
	count := func() perfCounts { return perfCounts{-1, -1} }
	if s.countSyscalls {
		count = countPerf(s.dir, pid)
	}
	r.res, err = s.client(w.cfg, addr)
	r.perf = count()
	after, uerr := readUsage(pid)
	if err == nil {
		err = uerr
	}
	samples := sampler.finish()
	if w.cfg.Open && r.res.AllOpen > 0 && r.res.FirstEnd > r.res.AllOpen {
		r.plateau, _ = plateau(samples, r.res.AllOpen, r.res.FirstEnd)
		r.phases = splitPhases(before, samples, arrivalCounts{r.res.ArrivalBase, r.res.Arrivals},
			r.res.AllOpen, r.res.FirstEnd, w.cfg.Requests)
	}
	r.peakKB, _ = memKB(pid, "VmHWM")
	r.cpu = after.cpu - before.cpu
	r.kernelCPU = after.kernel - before.kernel
	return r, err
}

// client runs the client mode on CPU 1 against addr and returns its result.
func (s *suite) client(cfg clientConfig, addr string) (clientResult, error) {
	var res clientResult
	args := []string{s.self, "-mode", "client", "-addr", addr, "-tokens", fmt.Sprint(cfg.Tokens),
		"-interval", cfg.Interval.String(), "-requests", fmt.Sprint(cfg.Requests), "-conc", fmt.Sprint(cfg.Conc)}
	if cfg.Open {
		args = append(args, "-open", "-ramp", cfg.Ramp.String())
	}
	if cfg.Reset {
		args = append(args, "-reset")
	}
	cmd := exec.Command("taskset", append([]string{"-c", "1"}, args...)...)
	cmd.Stderr = os.Stdout // progress lines
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("client: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("client output %q: %w", out, err)
	}
	fmt.Printf("    %d of %d requests ok in %.1fs, TTFT p50 %s, gap p99 %s", res.OK, res.Requests, res.Seconds,
		time.Duration(res.TTFTP50), time.Duration(res.GapP99))
	if res.Errors > 0 {
		fmt.Printf(", %d errors (first: %s)", res.Errors, res.FirstError)
	}
	fmt.Println()
	return res, nil
}

// readFirstLine waits for the first line a process writes to file.
func readFirstLine(file string, p *proc) (string, error) {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		if line, _, ok := strings.Cut(string(b), "\n"); ok {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s wrote no address:\n%s", p.name, p.stderr())
}

// spaced writes a duration as the tables do: "100 ms", "1 s".
func spaced(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%d ms", d/time.Millisecond)
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
