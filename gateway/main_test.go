package gateway

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"
)

// Health checkers, queued waiters and the quota settler are goroutines:
// every test must stop what it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}
