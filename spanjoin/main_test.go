package spanjoin

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"
)

// The joiner starts no goroutine; the end-to-end test's engine, proxy,
// receiver and exporters must all have stopped, but for fasthttp's
// process-wide sleepers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}
