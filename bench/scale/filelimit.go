//go:build linux || darwin

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises RLIMIT_NOFILE's soft limit to the hard one; the
// child processes inherit it.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	old := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	fmt.Printf("# RLIMIT_NOFILE: soft limit raised from %d to the hard limit, %d\n", old, lim.Max)
	return lim.Max, nil
}
