//go:build integration

package gateway

import (
	"testing"

	"github.com/ttftlens/ttftlens/internal/redistest"
)

// BenchmarkGatewayStepQuota is BenchmarkGatewayStep's whole step on each
// quota backend, the same run: what Redis on loopback adds is the
// difference of their p50 and p99 (each step timed on its own). The
// settlement's round trip is off the step (queued, sent by the settler).
func BenchmarkGatewayStepQuota(b *testing.B) {
	r := redistest.Start(b)
	for _, bc := range []struct {
		name    string
		backend QuotaBackend
	}{
		{"local", QuotaBackend{}},
		{"redis", redisBackend(r, QuotaFailClosed)}, // a fallback would time the local buckets
	} {
		b.Run(bc.name, func(b *testing.B) {
			gb := newGatewayBenchOn(b, bc.backend)
			gb.g.Start()
			timeSteps(b, gb)
		})
	}
}
