//go:build linux || darwin

package sock

import "syscall"

// FileLimit returns the process's limit on open files (RLIMIT_NOFILE's
// soft value, which the kernel enforces).
func FileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// RaiseFileLimit raises the process's limit on open files (RLIMIT_NOFILE)
// from its soft value to its hard one, which child processes inherit, and
// returns both.
func RaiseFileLimit() (was, now uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	was, lim.Cur = lim.Cur, lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return was, was, err
	}
	return was, lim.Max, nil
}
