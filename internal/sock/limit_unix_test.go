//go:build linux || darwin

package sock

import "testing"

// TestRaiseFileLimit: the soft limit on open files ends at the hard one,
// never lower than it was, and FileLimit reads it.
func TestRaiseFileLimit(t *testing.T) {
	was, now, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	if now < was {
		t.Errorf("limit lowered from %d to %d", was, now)
	}
	if got, err := FileLimit(); err != nil || got != now {
		t.Errorf("FileLimit() = %d, %v; want the raised limit %d", got, err, now)
	}
}
