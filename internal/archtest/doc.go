// Package archtest holds the tests that keep the code in step with
// ARCHITECTURE.md: the import rules of its package table, the proxy core's
// ignorance of engines, system calls made only in internal/sock, and
// documentation that points only inside the repository or at public specs.
package archtest
