//go:build !(linux || darwin)

package sock

import "errors"

// RaiseFileLimit is not known here.
func RaiseFileLimit() (was, now uint64, err error) {
	return 0, 0, errors.New("no limit on open files to raise here")
}
