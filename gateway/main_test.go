package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// Health checkers, queued waiters and the quota settler are goroutines:
// every test must stop what it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's own background goroutines, of the real proxies the
		// replica tests run (see proxy/harness_test.go).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}
