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
// whose mean is its baseline. The proxy under test runs on CPU 0; the
// client and the upstream share CPU 1. Each proxy run gets a fresh process.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	var s suite
	flag.StringVar(&s.workloads, "workloads", "c1,c64,s1000,s8000", "workloads to run: c1 (one client, 16 tokens), c64 (64 clients, 64 tokens), s1000 (many streams, 50 tokens 100 ms apart), s8000 (more streams, tokens 1 s apart)")
	flag.StringVar(&s.proxies, "proxies", "nginx,ttftlens", "proxies to measure, in this order")
	flag.BoolVar(&s.quick, "quick", false, "a tenth of every size (a check that the suite works, not figures)")
	flag.IntVar(&s.c1Requests, "c1-requests", 3000, "c1: requests")
	flag.IntVar(&s.c64Requests, "c64-requests", 10000, "c64: requests")
	flag.IntVar(&s.s1000Streams, "s1000-streams", 1000, "s1000: streams")
	flag.IntVar(&s.s8000Streams, "s8000-streams", 8000, "s8000: streams")
	flag.IntVar(&s.s8000Tokens, "s8000-tokens", 20, "s8000: tokens per stream, 1 s apart")
	flag.StringVar(&s.ttftlensBin, "ttftlens", "", "a ttftlens binary to measure (default: built from ./cmd/ttftlens)")
	flag.StringVar(&s.ttftlensFlags, "ttftlens-flags", "", "more flags for ttftlens serve, space-separated")
	flag.BoolVar(&s.keep, "keep", false, "keep the working directory (logs, configs)")
	flag.BoolVar(&s.countSyscalls, "count-syscalls", true, "count the proxy's system calls and context switches during its run (perf stat; adds a little to every call)")
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

// suite is the whole benchmark.
type suite struct {
	workloads, proxies         string
	quick, keep, countSyscalls bool
	built                      bool // ttftlens was built from this checkout
	c1Requests, c64Requests    int
	s1000Streams, s8000Streams int
	s8000Tokens                int
	ttftlensBin, ttftlensFlags string
	dir, self, upstream        string
	fileLimit                  uint64
	rows                       []workloadResult
}

// workload is one load shape.
type workload struct {
	name  string
	label string
	cfg   clientConfig
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
	direct  []run          // before the first proxy, then after each
	proxied map[string]run // by proxy name
	names   []string
}

func (s *suite) workloadList() ([]workload, error) {
	scale := func(n int) int {
		if s.quick {
			return max(n/10, 1)
		}
		return n
	}
	all := map[string]workload{
		"c1":    {"c1", "c=1, 16 tokens", clientConfig{Tokens: 16, Requests: scale(s.c1Requests), Conc: 1}},
		"c64":   {"c64", "c=64, 64 tokens", clientConfig{Tokens: 64, Requests: scale(s.c64Requests), Conc: 64}},
		"s1000": {"s1000", "", clientConfig{Tokens: 50, Interval: 100 * time.Millisecond, Requests: scale(s.s1000Streams), Open: true, Ramp: time.Second}},
		"s8000": {"s8000", "", clientConfig{Tokens: s.s8000Tokens, Interval: time.Second, Requests: scale(s.s8000Streams), Open: true, Ramp: 4 * time.Second}},
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
		if w.cfg.Open {
			// A proxied stream holds two sockets in the proxy.
			if most := int((s.fileLimit - 200) / 2); w.cfg.Requests > most {
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
	works, err := s.workloadList()
	if err != nil {
		return err
	}
	if err := need("nginx", "nginx"); err != nil {
		return err
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
		r, err := s.runWorkload(w)
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
	for name := range strings.SplitSeq(s.proxies, ",") {
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
	addr, err := freePort()
	if err != nil {
		return run{}, err
	}
	var p *proc
	switch name {
	case "nginx":
		conf := filepath.Join(s.dir, "nginx.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, s.dir, s.upstream, addr, s.fileLimit), 0o644); err != nil {
			return run{}, err
		}
		p, err = start(s.dir, name, 0, nil, "nginx", "-p", s.dir, "-c", conf, "-e", filepath.Join(s.dir, "nginx-error.log"))
	case "ttftlens":
		admin, err2 := freePort()
		if err2 != nil {
			return run{}, err2
		}
		args := []string{s.ttftlensBin, "serve", "--listen", addr, "--admin-listen", admin,
			"--upstream", "http://" + s.upstream, "--engine", "generic",
			// Every client connects from 127.0.0.1.
			"--max-conns", "-1", "--max-conns-per-client", "-1", "--log-level", "warn"}
		args = append(args, strings.Fields(s.ttftlensFlags)...)
		records, err2 := os.Create(filepath.Join(s.dir, "ttftlens-records.log"))
		if err2 != nil {
			return run{}, err2
		}
		defer records.Close()
		p, err = start(s.dir, name, 0, records, args...)
	default:
		return run{}, fmt.Errorf("-proxies: unknown %q (nginx, ttftlens)", name)
	}
	if err != nil {
		return run{}, err
	}
	defer p.stop()
	if err := waitListening(addr, p); err != nil {
		return run{}, err
	}
	pid := p.pid()
	fmt.Printf("  %s (pid %d on %s, CPU 0)\n", name, pid, addr)
	warm := clientConfig{Tokens: 4, Requests: 50, Conc: 4}
	if _, err := s.client(warm, addr); err != nil {
		return run{}, fmt.Errorf("%s warm-up: %w", name, err)
	}
	time.Sleep(200 * time.Millisecond)
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
