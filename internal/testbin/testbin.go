// Package testbin finds the outside programs that integration tests start
// (files built with the integration tag). A missing program fails the test,
// never skips it: the suite (scripts/test.sh) installs every one of them.
package testbin

import (
	"os/exec"
	"testing"
)

// packages names the Debian package that provides each program the
// integration tests start.
var packages = map[string]string{
	"chromium":     "chromium",
	"kubectl":      "kubectl (or kubernetes-client)",
	"nginx":        "nginx",
	"podman":       "podman",
	"prometheus":   "prometheus",
	"redis-server": "redis-server",
}

// Path returns where name is on $PATH, or fails t with a message naming the
// program and how to install it.
func Path(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		pkg, ok := packages[name]
		if !ok {
			pkg = name
		}
		t.Fatalf("%s is not installed: this integration test starts it; ./scripts/test.sh installs it, or apt-get install %s (%v)", name, pkg, err)
	}
	return path
}
