// Package redistest runs Debian's redis-server for tests (the gateway's
// Redis quota backend, and proxies sharing one). Its code is built with the
// integration tag only, as are the tests that use it.
package redistest
