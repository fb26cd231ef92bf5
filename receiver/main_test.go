package receiver

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start gRPC and HTTP servers and clients: all must have stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
