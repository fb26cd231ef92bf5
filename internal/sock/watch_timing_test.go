//go:build linux

package sock

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Benchmarks of the watcher: what watching clients for a disconnect
// costs, against polling TCP_INFO. Figures and how to run them: BENCHMARKS.md,
// "Transport and disconnect watching".

// monoNS is CLOCK_MONOTONIC in nanoseconds, comparable across processes
// (unlike time.Now's monotonic reading, which starts at process start).
func monoNS() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// cpuNS is this process's CPU time, user plus system, in nanoseconds.
func cpuNS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// raiseNoFile raises the soft limit on open files towards want, up to the
// hard limit, and returns the soft limit in force.
func raiseNoFile(want uint64) uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < want {
		rl.Cur = min(want, rl.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return rl.Cur
}

// loopbackPair returns both ends of one loopback TCP connection, closed at
// the end of the benchmark.
func loopbackPair(tb testing.TB) (srv, cli *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// connFD returns the descriptor under c; it stays valid while c is open.
func connFD(tb testing.TB, c syscall.Conn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		tb.Fatal(err)
	}
	return fd
}

// BenchmarkWatch measures registering one client connection with the
// watcher and removing it again, as every request does once.
func BenchmarkWatch(b *testing.B) {
	srv, _ := loopbackPair(b)
	w, err := NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	gone := func() {}
	b.ReportAllocs()
	for b.Loop() {
		t := w.Watch(srv, gone)
		if t.id == 0 {
			b.Fatal("connection not watched")
		}
		w.Unwatch(t)
	}
}

// BenchmarkIdlePhases measures what a pooled upstream connection's reuse
// adds to a request: its registration re-armed idle when it goes back to
// the pool and back at its end when taken (two epoll_ctl), and the empty
// check before the write (one recvfrom peek).
func BenchmarkIdlePhases(b *testing.B) {
	srv, _ := loopbackPair(b)
	w, err := NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	raw := New(srv)
	t := w.WatchEnd(raw)
	defer w.Unwatch(t)
	idle := func(bool) {}
	b.ReportAllocs()
	for b.Loop() {
		if !w.WatchIdle(t, idle) || !w.EndIdle(t) {
			b.Fatal("a quiet connection refused")
		}
		if bytes, ended := raw.Unread(); bytes || ended {
			b.Fatal("a quiet connection not empty")
		}
	}
}

// BenchmarkTCPInfo measures one getsockopt(TCP_INFO) on a loopback
// connection: the unit cost of the alternative to epoll, polling every
// client's TCP state.
func BenchmarkTCPInfo(b *testing.B) {
	srv, _ := loopbackPair(b)
	fd := connFD(b, srv)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err != nil {
			b.Fatal(err)
		}
	}
}

// helperEnv carries "address,count" to the client process of
// BenchmarkWatch10k.
const helperEnv = "TTFTLENS_WATCH_HELPER"

// TestWatchHelperProcess is the client side of BenchmarkWatch10k, run in a
// process of its own (the test binary, started again) so that the 10,000
// client sockets count against its file limit, not ours, and the CPU it
// spends closing them is not counted as the watcher's. It skips unless the
// benchmark started it.
//
// Protocol, on fd 3: "dialed N" once connected. For each "close K" on
// stdin, it closes its first K open connections and writes "PORT NS" per
// closed connection (its local port, CLOCK_MONOTONIC just before close),
// then "done". It closes the rest and exits when stdin closes.
func TestWatchHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("client process of BenchmarkWatch10k")
	}
	addr, count, _ := strings.Cut(spec, ",")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	raiseNoFile(uint64(n) + 64)
	ctl := bufio.NewWriter(os.NewFile(3, "ctl"))
	var conns []net.Conn
	var ports []int
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Logf("dial %d: %v", len(conns), err)
			break
		}
		conns = append(conns, c)
		ports = append(ports, c.LocalAddr().(*net.TCPAddr).Port)
	}
	fmt.Fprintf(ctl, "dialed %d\n", len(conns))
	ctl.Flush()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var k int
		if _, err := fmt.Sscanf(in.Text(), "close %d", &k); err != nil {
			continue
		}
		k = min(k, len(conns))
		at := make([]int64, k)
		for i, c := range conns[:k] {
			at[i] = monoNS()
			c.Close()
		}
		for i := range k {
			fmt.Fprintf(ctl, "%d %d\n", ports[i], at[i])
		}
		conns, ports = conns[k:], ports[k:]
		fmt.Fprintln(ctl, "done")
		ctl.Flush()
	}
}

// BenchmarkWatch10k measures the CPU cost of watching 10,000 open, idle
// client connections, and how fast and at what cost 1,000 of them are
// noticed when their clients close. Run it once: -benchtime 1x (it runs
// once anyway, taking about 10 s). The client ends live in a helper process
// (TestWatchHelperProcess); this process holds the accepted ends, as the
// proxy does.
//
// Reported: CPU ms per wall second while idle, before and after registering
// the 10,000 (Go runtime floor vs watching); the cost of one watch at that
// size; one sweep of getsockopt(TCP_INFO) over all of them (what polling
// at 10 Hz would cost instead); detection latency from the client's close
// to the gone callback (p50, p99, max) and the CPU spent; the CPU used
// while detected connections stay registered (the loop is level-triggered)
// and after they are unwatched.
func BenchmarkWatch10k(b *testing.B) {
	const want, closeN = 10000, 1000
	const idle = 2 * time.Second
	limit := raiseNoFile(want + 256)
	n := min(want, int(limit)-256)
	if n < want {
		b.Logf("RLIMIT_NOFILE %d: watching %d connections, not %d", limit, n, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var conns []*net.TCPConn
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c.(*net.TCPConn))
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-acceptDone
		for _, c := range conns {
			c.Close()
		}
	}()

	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer ctlR.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+ln.Addr().String()+","+strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{ctlW}
	var childOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &childOut, &childOut
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ctlW.Close()
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("client process: %v\n%s", err, childOut.Bytes())
		}
	}()
	ctl := bufio.NewReader(ctlR)
	line, err := ctl.ReadString('\n')
	var dialed int
	if _, serr := fmt.Sscanf(line, "dialed %d", &dialed); err != nil || serr != nil {
		b.Fatalf("client process: %q %v %v\n%s", line, err, serr, childOut.Bytes())
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := len(conns)
		mu.Unlock()
		if got >= dialed {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("accepted %d of %d", got, dialed)
		}
	}
	mu.Lock()
	open := slices.Clone(conns)
	mu.Unlock()
	n = len(open)

	w, err := NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()

	// cpuPerSec returns CPU ms per wall second over d of doing nothing.
	cpuPerSec := func(d time.Duration) float64 {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		c0, t0 := cpuNS(), monoNS()
		time.Sleep(d)
		c1, t1 := cpuNS(), monoNS()
		return float64(c1-c0) / float64(t1-t0) * 1e3
	}
	b.ResetTimer()

	baseline := cpuPerSec(idle)

	fired := make([]atomic.Int64, n)
	var firedN atomic.Int64
	allGone := make(chan struct{})
	tokens := make([]Token, n)
	byPort := make(map[int]int, n)
	t0 := monoNS()
	for i, c := range open {
		tokens[i] = w.Watch(c, func() {
			fired[i].Store(monoNS())
			if firedN.Add(1) == closeN {
				close(allGone)
			}
		})
		if tokens[i].id == 0 {
			b.Fatalf("connection %d not watched", i)
		}
	}
	watchNS := float64(monoNS()-t0) / float64(n)
	for i, c := range open {
		byPort[c.RemoteAddr().(*net.TCPAddr).Port] = i
	}

	watched := cpuPerSec(idle)

	// The alternative: poll every client's TCP state.
	fds := make([]int, n)
	for i, c := range open {
		fds[i] = connFD(b, c)
	}
	const sweeps = 20
	c0, s0 := cpuNS(), monoNS()
	for range sweeps {
		for _, fd := range fds {
			if _, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err != nil {
				b.Fatal(err)
			}
		}
	}
	sweepCPU := float64(cpuNS()-c0) / sweeps
	sweepWall := float64(monoNS()-s0) / sweeps

	// 1,000 clients leave.
	c0 = cpuNS()
	if _, err := fmt.Fprintf(stdin, "close %d\n", closeN); err != nil {
		b.Fatal(err)
	}
	select {
	case <-allGone:
	case <-time.After(10 * time.Second):
		b.Fatalf("%d of %d disconnects noticed within 10 s", firedN.Load(), closeN)
	}
	detectCPU := float64(cpuNS() - c0)
	var lat []time.Duration
	closed := make([]int, 0, closeN)
	for {
		line, err := ctl.ReadString('\n')
		if err != nil {
			b.Fatalf("client process: %v", err)
		}
		if line == "done\n" {
			break
		}
		var port int
		var at int64
		if _, err := fmt.Sscanf(line, "%d %d", &port, &at); err != nil {
			b.Fatalf("client process: %q", line)
		}
		i, ok := byPort[port]
		if !ok {
			b.Fatalf("port %d was not accepted here", port)
		}
		closed = append(closed, i)
		lat = append(lat, time.Duration(fired[i].Load()-at))
	}
	if extra := firedN.Load() - closeN; extra != 0 {
		b.Errorf("%d gone callbacks for clients still connected", extra)
	}

	// Detected connections stay in the epoll set until unwatched (the
	// proxy unwatches when the request ends).
	registered := cpuPerSec(time.Second)
	for _, i := range closed {
		w.Unwatch(tokens[i])
		tokens[i] = Token{}
	}
	unwatched := cpuPerSec(time.Second)
	b.StopTimer()

	t0 = monoNS()
	left := 0
	for i := range tokens {
		if tokens[i].id != 0 {
			w.Unwatch(tokens[i])
			left++
		}
	}
	unwatchNS := float64(monoNS()-t0) / float64(max(left, 1))

	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(int(q*float64(len(lat))), len(lat)-1)]) / 1e3
	}
	b.ReportMetric(float64(n), "conns")
	b.ReportMetric(baseline, "idle_cpu_ms/s_unwatched")
	b.ReportMetric(watched, "idle_cpu_ms/s_watched")
	b.ReportMetric(watchNS, "watch_ns_at_10k")
	b.ReportMetric(unwatchNS, "unwatch_ns_at_10k")
	b.ReportMetric(sweepCPU/1e6, "tcpinfo_sweep_cpu_ms")
	b.ReportMetric(sweepWall/float64(n), "tcpinfo_ns/call")
	b.ReportMetric(sweepCPU/1e6*10, "tcpinfo_10Hz_cpu_ms/s")
	b.ReportMetric(pct(0.5), "detect_p50_us")
	b.ReportMetric(pct(0.99), "detect_p99_us")
	b.ReportMetric(float64(lat[len(lat)-1])/1e3, "detect_max_us")
	b.ReportMetric(detectCPU/1e6, "detect_cpu_ms")
	b.ReportMetric(detectCPU/closeN/1e3, "detect_cpu_us/disconnect")
	b.ReportMetric(registered, "cpu_ms/s_detected_still_watched")
	b.ReportMetric(unwatched, "cpu_ms/s_after_unwatch")
	b.ReportMetric(0, "ns/op")
}
