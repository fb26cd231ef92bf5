package proxy

import (
	"encoding/hex"
	"math/rand/v2"

	"github.com/ttftlens/ttftlens/record"
)

// traceContext is the W3C trace context of one request.
type traceContext struct {
	trace  record.TraceID
	parent record.SpanID // the caller's span; zero when we started the trace
	span   record.SpanID // ours, sent upstream as the parent
	flags  byte
}

// parseTraceparent reads a W3C traceparent header (version 00 layout; a
// higher version is read by its 00 prefix, as the spec asks). It rejects
// version ff, all-zero ids and malformed values.
func parseTraceparent(v []byte) (tc traceContext, ok bool) {
	// 00-<32 hex>-<16 hex>-<2 hex>
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return tc, false
	}
	var version [1]byte
	if _, err := hex.Decode(version[:], v[0:2]); err != nil || version[0] == 0xff || !lowerHex(v[:55]) {
		return tc, false
	}
	if version[0] == 0 && len(v) != 55 {
		return tc, false
	}
	if version[0] > 0 && len(v) > 55 && v[55] != '-' {
		return tc, false
	}
	var flags [1]byte
	if _, err := hex.Decode(tc.trace[:], v[3:35]); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(tc.parent[:], v[36:52]); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(flags[:], v[53:55]); err != nil {
		return tc, false
	}
	if tc.trace == (record.TraceID{}) || tc.parent.IsZero() {
		return traceContext{}, false
	}
	tc.flags = flags[0]
	return tc, true
}

// lowerHex reports whether every byte is a lowercase hex digit or '-'.
func lowerHex(v []byte) bool {
	for _, c := range v {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}

// continueOrStart continues the caller's trace (a new span under its
// parent) or starts a sampled one.
func continueOrStart(header []byte) traceContext {
	tc, ok := parseTraceparent(header)
	if !ok {
		tc = traceContext{flags: 0x01}
		randomID(tc.trace[:])
	}
	randomID(tc.span[:])
	return tc
}

// appendTraceparent appends the header value carrying our span as parent.
func (tc *traceContext) appendTraceparent(dst []byte) []byte {
	dst = append(dst, "00-"...)
	dst = hex.AppendEncode(dst, tc.trace[:])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, tc.span[:])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, []byte{tc.flags})
}

// randomID fills b with random bytes, never all zero.
func randomID(b []byte) {
	for {
		for i := 0; i < len(b); i += 8 {
			x := rand.Uint64()
			for j := i; j < len(b) && j < i+8; j++ {
				b[j] = byte(x)
				x >>= 8
			}
		}
		for _, c := range b {
			if c != 0 {
				return
			}
		}
	}
}

// maxRequestIDLen bounds a client-supplied X-Request-Id.
const maxRequestIDLen = 128

// saneRequestID reports whether a client's X-Request-Id can be kept: 1 to
// 128 bytes of letters, digits and . _ - : / + = @ ~.
func saneRequestID(v []byte) bool {
	if len(v) == 0 || len(v) > maxRequestIDLen {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == '-' || c == ':' || c == '/' || c == '+' || c == '=' || c == '@' || c == '~':
		default:
			return false
		}
	}
	return true
}

// newRequestID returns 32 random lowercase hex digits.
func newRequestID() string {
	var b [16]byte
	randomID(b[:])
	return hex.EncodeToString(b[:])
}
