//go:build !race

package proxy

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/ttftlens/ttftlens/proxy/engines"
)

// stackFigures are the process's goroutine stacks at one moment.
type stackFigures struct {
	stackInuse uint64
	goroutines int
}

func readStacks() stackFigures {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return stackFigures{stackInuse: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// since is what was added between earlier and f.
func (f stackFigures) since(earlier stackFigures) (stack int64, goroutines int) {
	return int64(f.stackInuse) - int64(earlier.stackInuse), f.goroutines - earlier.goroutines
}

// stackCase is the environment variable that makes this test binary measure
// one case of TestOpenStreamStack (in a process of its own).
const stackCase = "TTFTLENS_STACK_CASE"

// stackCases are the streams TestOpenStreamStack measures: each second
// event takes one of the deepest paths of parsing an event.
var stackCases = []struct {
	name, engine, second string
}{
	{"generic content", "", `{"choices":[{"index":0,"delta":{"content":"second"}}]}`},
	{"vllm metrics, long floats", engines.KindVLLM, `{"choices":[{"index":0,"delta":{"content":"second"}}],` +
		`"metrics":{"queue_time_ms":0.12345678901234567,"time_to_first_token_ms":123.45678901234567,"generation_time_ms":9.876543210987654e-1}}`},
}

// TestOpenStreamStack holds an open stream's goroutine to a 4 KiB stack.
// Each case runs in a process of its own: stacks freed by what ran before
// in a process are reused without new spans, which the measure would miss.
func TestOpenStreamStack(t *testing.T) {
	if name := os.Getenv(stackCase); name != "" {
		for _, tc := range stackCases {
			if tc.name == name {
				measureOpenStreamStack(t, tc.engine, tc.second)
				return
			}
		}
		t.Fatalf("%s=%q: no such case", stackCase, name)
	}
	for _, tc := range stackCases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestOpenStreamStack$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), stackCase+"="+tc.name)
			out, err := cmd.CombinedOutput()
			t.Logf("%s", out)
			if err != nil {
				t.Fatalf("the measuring process: %v", err)
			}
		})
	}
}

// measureOpenStreamStack: n streams held open mid-stream through the proxy,
// less the same n held open directly against the upstream (which runs in
// this process), is the proxy's stack per open stream. Each stream measured
// has relayed its second event, which its own goroutine read, parsed and
// wrote.
func measureOpenStreamStack(t *testing.T, engine, second string) {
	const (
		n      = 400
		budget = 4*1024 + 512 // a 4 KiB stack per stream goroutine, and noise
	)
	release := make(chan struct{})
	hold := func(c *upConn) {
		c.role()
		c.event(second)
		<-release
		c.content("rest")
		c.finish("stop")
		c.done()
		c.end()
	}
	viaUp := startUpstream(t, hold)
	directUp := startUpstream(t, hold)
	proxyAddr, _, _ := startProxy(t, viaUp.url, func(c *Config) { c.Engine = engine })
	directAddr := directUp.ln.Addr().String()
	var conns []net.Conn
	defer func() { // before the proxy's and the upstreams' cleanups
		close(release)
		for _, c := range conns {
			c.Close()
		}
	}()
	// open holds streams open at addr once each client has read its second
	// event. The requests go out together, the responses are read after;
	// the clients are raw connections, read on this goroutine.
	open := func(addr string, streams int) {
		readers := make([]*bufio.Reader, streams)
		for i := range readers {
			var conn net.Conn
			conn, readers[i] = rawClient(t, addr, chat("m", ""))
			conns = append(conns, conn)
		}
		for _, br := range readers {
			readUntil(t, br, "second")
		}
	}
	// No collection from here on: it would shrink the stacks measured (a
	// goroutine parked on less than a quarter of its stack), and those of
	// fasthttp's idle workers, which grow back when one is reused.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.GC()
	// Warm fasthttp's workers and the pools a stream takes from. The
	// streams measured are opened one at a time, so each finds an idle
	// worker (one goes idle after its hijack, which may come after the
	// stream's second event) and no worker is counted.
	open(proxyAddr, 4)
	open(directAddr, 1)

	before := readStacks()
	for range n {
		open(proxyAddr, 1)
	}
	viaProxy := readStacks()
	for range n {
		open(directAddr, 1)
	}
	direct := readStacks()

	viaStack, viaG := viaProxy.since(before)
	directStack, directG := direct.since(viaProxy)
	perStream := float64(viaStack-directStack) / n
	t.Logf("%d open streams: via the proxy %d B of stack in %d goroutines, directly %d B in %d: the proxy's share per stream %.0f B in %.2f goroutines",
		n, viaStack, viaG, directStack, directG, perStream, float64(viaG-directG)/n)
	if perStream > budget {
		t.Errorf("an open stream's goroutine needs more than a 4 KiB stack: its deepest path (event read, parse, write) grew; see ARCHITECTURE.md. "+
			"%d open streams took %d B of stack via the proxy and %d B directly: %.0f B per stream, want <= %d",
			n, viaStack, directStack, perStream, budget)
	}
}
