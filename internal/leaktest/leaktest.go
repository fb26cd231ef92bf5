// Package leaktest is what the tests that start servers tell goleak to
// expect at their end.
package leaktest

import "go.uber.org/goleak"

// FasthttpSleepers are fasthttp's own background goroutines: two cleaners
// that finish their current sleep (up to 10 s) after Shutdown and exit, and
// two process-wide singletons (the Date header refresher, the default
// dialer's address cache). They are named so that any other goroutine left
// behind still fails the run.
var FasthttpSleepers = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
}
