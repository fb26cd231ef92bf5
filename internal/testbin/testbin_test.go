package testbin

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Fatalf said.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// TestPathMissingFails checks that a missing program fails the test with
// its name and how to install it.
func TestPathMissingFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, name := range []string{"nginx", "no-such-program"} {
		r := &recorder{TB: t}
		func() {
			defer func() {
				if p := recover(); p != r {
					t.Fatalf("%s: Path did not fail the test (recovered %v)", name, p)
				}
			}()
			Path(r, name)
		}()
		if !strings.HasPrefix(r.msg, name+" is not installed") || !strings.Contains(r.msg, "scripts/test.sh installs it") {
			t.Errorf("%s: message %q does not name the program and how to install it", name, r.msg)
		}
	}
}
