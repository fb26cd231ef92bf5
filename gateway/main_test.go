package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// Health checkers and queued waiters are goroutines: every test must stop
// what it starts.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
