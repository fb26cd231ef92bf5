//go:build !(linux || darwin)

package sock

import "errors"

// FileLimit is not known here.
func FileLimit() (uint64, error) {
	return 0, errors.New("no limit on open files known here")
}

// RaiseFileLimit is not known here.
func RaiseFileLimit() (was, now uint64, err error) {
	return 0, 0, errors.New("no limit on open files to raise here")
}
