package clock

import (
	"testing"

	"go.uber.org/goleak"
)

// The sleep tests start sleepers: each must have returned.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
