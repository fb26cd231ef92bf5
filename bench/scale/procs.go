package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procUsage is what /proc says about a process at one moment.
type procUsage struct {
	at     int64         // when it was read, Unix ns
	cpu    time.Duration // utime + stime, every thread, dead ones too
	kernel time.Duration // stime alone
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

func readUsage(pid int) (procUsage, error) {
	u := procUsage{at: time.Now().UnixNano()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command name, which ends with the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, errors.New("short /proc stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(utime+stime) * clockTick
	u.kernel = time.Duration(stime) * clockTick
	return u, nil
}

// perfCounts are what perf stat counted for a process: its system calls,
// every kind (the raw_syscalls:sys_enter tracepoint), and its context
// switches; -1 when not counted.
type perfCounts struct{ syscalls, switches int64 }

// countPerf counts pid's system calls and context switches until the
// returned function is called, which returns them (-1 each when perf is
// missing or failed).
func countPerf(dir string, pid int) func() perfCounts {
	none := perfCounts{-1, -1}
	out := filepath.Join(dir, "perf-stat.csv")
	cmd := exec.Command("perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter,context-switches", "-p", strconv.Itoa(pid), "-o", out)
	if err := cmd.Start(); err != nil {
		return func() perfCounts { return none }
	}
	time.Sleep(300 * time.Millisecond) // attached before the run starts
	return func() perfCounts {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b, err := os.ReadFile(out)
		if err != nil {
			return none
		}
		c := none
		for line := range strings.Lines(string(b)) {
			f := strings.Split(line, ",")
			if len(f) < 3 {
				continue
			}
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(f[2], "raw_syscalls:sys_enter"):
				c.syscalls = n
			case strings.HasPrefix(f[2], "context-switches"):
				c.switches = n
			}
		}
		return c
	}
}

// memKB reads a /proc/PID/status memory line (VmRSS, VmHWM) in KiB.
func memKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// procSampler samples a process's VmRSS and CPU time every 50 ms, with
// the wall clock.
type procSampler struct {
	mu      sync.Mutex
	samples []procSample
	stop    chan struct{}
	done    chan struct{}
}

type procSample struct {
	at  int64 // Unix ns
	kb  int64
	cpu time.Duration
}

func sampleProc(pid int) *procSampler {
	s := &procSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			kb, err1 := memKB(pid, "VmRSS")
			u, err2 := readUsage(pid)
			if err1 == nil && err2 == nil {
				s.mu.Lock()
				s.samples = append(s.samples, procSample{time.Now().UnixNano(), kb, u.cpu})
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the samples.
func (s *procSampler) finish() []procSample {
	close(s.stop)
	<-s.done
	return s.samples
}

// plateau returns the median VmRSS sampled between from and to (Unix ns),
// false when no sample fell in it.
func plateau(samples []procSample, from, to int64) (int64, bool) {
	var in []int64
	for _, x := range samples {
		if x.at >= from && x.at <= to {
			in = append(in, x.kb)
		}
	}
	if len(in) == 0 {
		return 0, false
	}
	return percentile(in, 50), true
}

// proc is a started child process, stopped by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	dir  string
}

// start runs the command pinned to cpu (taskset), its stderr to
// dir/name.err and stdout to stdout (a file, or nil for dir/name.out).
func start(dir, name string, cpu int, stdout *os.File, args ...string) (*proc, error) {
	errf, err := os.Create(filepath.Join(dir, name+".err"))
	if err != nil {
		return nil, err
	}
	defer errf.Close()
	if stdout == nil {
		if stdout, err = os.Create(filepath.Join(dir, name+".out")); err != nil {
			return nil, err
		}
		defer stdout.Close()
	}
	cmd := exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu)}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, errf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{name: name, cmd: cmd, dir: dir}, nil
}

// pid is the process's own PID: taskset execs the command in place.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the PID and waits up to 10 s, then SIGKILL.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// stderr returns the tail of what the process wrote on stderr.
func (p *proc) stderr() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, p.name+".err"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitListening waits until addr accepts a connection.
func waitListening(addr string, p *proc) error {
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		if p.cmd.ProcessState != nil {
			break
		}
	}
	return fmt.Errorf("%s is not listening on %s:\n%s", p.name, addr, p.stderr())
}

// freePort returns a loopback address the kernel had free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// nginxConf runs one nginx process (master_process off: the one process is
// the worker) in the foreground with every path under dir: a reverse proxy
// to the upstream over HTTP/1.1 keep-alive, without buffering, its access
// log a file as ttftlens' records are.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile %[4]d;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections %[4]d; }
http {
	access_log %[1]s/nginx-access.log;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream engine { server %[2]s; keepalive 1024; keepalive_timeout 4s; }
	server {
		listen %[3]s backlog=4096;
		location / {
			proxy_pass http://engine;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
`

// need fails when the program bin is not on PATH, saying how to install
// it: `make scale` does (scripts/need.sh), from Debian's package pkg.
func need(bin, pkg string) error {
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%s is not installed: `make scale` installs it, or apt-get install %s (%w)", bin, pkg, err)
	}
	return nil
}

func nginxVersion() string {
	out, _ := exec.Command("nginx", "-v").CombinedOutput()
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
}
