//go:build linux || darwin

package sock

import "testing"

// TestRaiseFileLimit: the soft limit on open files ends at the hard one,
// never lower than it was.
func TestRaiseFileLimit(t *testing.T) {
	was, now, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	if now < was {
		t.Errorf("limit lowered from %d to %d", was, now)
	}
}
