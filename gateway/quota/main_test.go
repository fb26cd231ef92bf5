package quota

import (
	"testing"

	"go.uber.org/goleak"
)

// The redis backend's settler is a goroutine: every test must stop what it
// starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
