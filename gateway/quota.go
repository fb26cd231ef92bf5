package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway/quota"
)

// The gateway's side of the quota backends (package quota): each key with
// a quota holds a quota.Limiter, built from the configuration by build;
// Admit answers a refusal with a Rejection.

// Reservation is what one request was charged at Admit. Call exactly one
// of Settle or Cancel when the request ends.
type Reservation = quota.Reservation

// HasQuota reports that Admit checks k against a quota (a nil k has none).
func (k *Key) HasQuota() bool { return k != nil && k.quota != nil }

// Admit charges key one request and est tokens, or returns a 429 Rejection
// (policy_block / quota_exceeded) with a Retry-After in seconds. A nil key
// (auth passthrough or none) or a key without quota is always admitted.
// With the redis backend it waits for Redis up to the backend's timeout;
// when Redis fails, on_failure decides: this replica's buckets (open) or a
// 503 Rejection (closed, worker_failure / quota_unavailable).
func (s *Snapshot) Admit(k *Key, est int) (Reservation, *Rejection) {
	if k == nil || k.quota == nil {
		return Reservation{}, nil
	}
	res, ref := k.quota.Admit(est)
	switch {
	case !ref.Refused():
		return res, nil
	case ref.Unavailable:
		return res, rejQuotaUnavailable
	}
	return res, quotaRejection(ref.Over, ref.Wait)
}

func quotaRejection(which string, wait time.Duration) *Rejection {
	// At least 1 (0 would invite an immediate retry), at most a day.
	secs := int(min(max(math.Ceil(wait.Seconds()), 1), 86400))
	return &Rejection{
		Status: 429, RetryAfter: secs, Type: which, Code: "rate_limit_exceeded",
		Message: "Rate limit reached for " + which + " on this API key; retry in " + strconv.Itoa(secs) + "s.",
		Reason:  endreason.PolicyBlock, Detail: endreason.DetailQuotaExceeded,
	}
}

var rejQuotaUnavailable = &Rejection{
	Status: 503, RetryAfter: 1, Type: "server_error", Code: "quota_unavailable",
	Message: "The quota service is unavailable; retry shortly.",
	// worker_failure, not policy_block: our own infrastructure refused,
	// not the key's usage, and a retry may pass (like no_healthy_upstream).
	Reason: endreason.WorkerFailure, Detail: endreason.DetailQuotaUnavailable,
}

// policy is how the keys' admissions use Redis.
func (c *RedisConfig) policy() quota.Policy {
	return quota.Policy{KeyPrefix: c.KeyPrefix, Timeout: c.Timeout, FailClosed: c.OnFailure == QuotaFailClosed}
}

// quotaStore returns the store a config with backend b uses: nil for the
// local backend, else the gateway's, made on first use. g.mu is held.
func (g *Gateway) quotaStore(b *QuotaBackend) (*quota.Redis, error) {
	if b.Kind != QuotaRedis {
		return nil, nil
	}
	if g.redis != nil {
		if g.redisConn != b.Redis.conn() {
			return nil, fmt.Errorf("quota_backend.redis: the connection (address, username, password, db, tls) cannot change on reload: restart to apply it")
		}
		return g.redis, nil
	}
	c, err := redisConn(b.Redis)
	if err != nil {
		return nil, err
	}
	return quota.NewRedis(c, g.now, g.log), nil
}

// quotaRedis is the gateway's redis store, nil while no config used one.
func (g *Gateway) quotaRedis() *quota.Redis {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.redis
}

// redisConn resolves c's connection: the password from the environment,
// the TLS files.
func redisConn(c RedisConfig) (quota.Conn, error) {
	conn := quota.Conn{Address: c.Address, Username: c.Username, DB: c.DB}
	if c.Password != "" {
		pw, err := resolveSecret(c.Password)
		if err != nil {
			return conn, fmt.Errorf("quota_backend.redis.password: %w", err)
		}
		conn.Password = pw
	}
	if c.TLS.Enabled {
		tc, err := redisTLS(c.TLS)
		if err != nil {
			return conn, err
		}
		conn.TLS = tc
	}
	return conn, nil
}

func redisTLS(c RedisTLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("quota_backend.redis.tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("quota_backend.redis.tls.ca_file: %s holds no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("quota_backend.redis.tls: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
