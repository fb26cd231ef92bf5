//go:build integration

package gateway

import "github.com/ttftlens/ttftlens/internal/redistest"

// redisBackend is a redis quota backend on r with a key prefix of the
// test's own and redistest's long timeout.
func redisBackend(r *redistest.Server, onFailure string) QuotaBackend {
	return QuotaBackend{Kind: QuotaRedis, Redis: RedisConfig{
		Address: r.Addr, KeyPrefix: r.KeyPrefix(), OnFailure: onFailure, Timeout: redistest.Timeout,
	}}
}
