//go:build !(linux || darwin)

package main

import "errors"

// raiseFileLimit fails: there is no RLIMIT_NOFILE to raise here (run
// refuses to start off Linux before it is called).
func raiseFileLimit() (uint64, error) {
	return 0, errors.New("no limit on open files to raise here")
}
