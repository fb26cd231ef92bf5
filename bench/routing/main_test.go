package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"
)

// A test that starts the stack (engines, proxy, log sink) must stop all of
// it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}
