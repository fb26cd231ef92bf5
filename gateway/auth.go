package gateway

import (
	"crypto/sha256"
	"crypto/subtle"

	"github.com/ttftlens/ttftlens/gateway/quota"
)

// Key is an authenticated API key: its name and what it may do. It never
// holds the key itself. Keys are immutable and belong to the Snapshot that
// returned them.
type Key struct {
	// Name is the configured name, for records (record.Record.Key).
	Name string
	// AllowBreakdown: the client may ask for its own Server-Timing
	// breakdown.
	AllowBreakdown bool
	hash           [32]byte
	quota          quota.Limiter // nil: unlimited
}

// Authenticate checks a request's Authorization header value (the raw
// bytes; not retained). With auth keys it returns the key, or a 401
// Rejection (missing_api_key, invalid_api_key). With auth passthrough or
// none it returns (nil, nil): there is no key, and with passthrough the
// proxy forwards the header unchanged; with keys it should not (the
// upstream has no business seeing our clients' keys).
//
// Timing: the presented key is hashed once (SHA-256, fixed cost for a given
// length) and the hash is looked up in a map. The map compares hashes, not
// secrets: how long the lookup takes depends on the hash of what the client
// sent, and learning which stored hash shares a prefix with SHA-256(guess)
// tells an attacker nothing about any key, since they cannot steer the
// hash's bytes (preimage resistance). The final comparison of the found hash
// is constant-time anyway. With 10,000 keys this is one hash and one map
// probe, not 10,000 comparisons.
func (s *Snapshot) Authenticate(authorization []byte) (*Key, *Rejection) {
	if s.auth != AuthKeys {
		return nil, nil
	}
	tok, ok := bearer(authorization)
	if !ok {
		return nil, rejMissingKey
	}
	h := sha256.Sum256(tok)
	k := s.keys[h]
	if k == nil || subtle.ConstantTimeCompare(k.hash[:], h[:]) != 1 {
		return nil, rejInvalidKey
	}
	return k, nil
}

// bearer returns the credentials of "Bearer <token>" (the scheme is
// case-insensitive, RFC 9110 §11.1; surrounding spaces are ignored).
func bearer(h []byte) ([]byte, bool) {
	for len(h) > 0 && (h[0] == ' ' || h[0] == '\t') {
		h = h[1:]
	}
	const scheme = "bearer"
	if len(h) <= len(scheme) || h[len(scheme)] != ' ' {
		return nil, false
	}
	for i := range len(scheme) {
		if h[i]|0x20 != scheme[i] {
			return nil, false
		}
	}
	tok := h[len(scheme)+1:]
	for len(tok) > 0 && tok[0] == ' ' {
		tok = tok[1:]
	}
	for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
		tok = tok[:len(tok)-1]
	}
	return tok, len(tok) > 0
}

// AllowBreakdown reports whether the client may ask for its own
// Server-Timing breakdown: the key's flag, or key_defaults.allow_breakdown
// when there is no key (auth passthrough or none).
func (s *Snapshot) AllowBreakdown(k *Key) bool {
	if k != nil {
		return k.AllowBreakdown
	}
	return s.cfg.KeyDefaults.AllowBreakdown
}
