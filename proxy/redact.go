package proxy

import (
	"bytes"
	"regexp"
	"strconv"
)

// secrets is the redaction rule for upstream text a record takes (an error
// body, a header value): records are logged and shown on the requests page,
// and an upstream may echo a client's key. Each match keeps its first group
// and loses the rest to [redacted]:
//   - the credential after "Bearer " or "Basic " (any case);
//   - a token starting "sk-" at a word boundary (OpenAI-style keys);
//   - the value after a name ending in key, token, secret or password (any
//     case) and "=" or ":", quoted or not: query strings, headers, JSON.
//
// It is a net, not a guarantee: a 401 or 403 body is never recorded at all.
var secrets = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[^\s"',;]+`),
	regexp.MustCompile(`\b(sk-)[A-Za-z0-9_-]+`),
	regexp.MustCompile(`(?i)([a-z0-9_-]*(?:key|token|secret|password)["']?\s*[=:]\s*["']?)[^\s"'&,;}]+`),
}

// redact returns s with the values the rule above finds replaced.
func redact(s string) string {
	for _, re := range secrets {
		s = re.ReplaceAllString(s, "${1}[redacted]")
	}
	return s
}

// upstreamAnswered is the record's error for an upstream 4xx or 5xx: the
// start of its body, redacted, and nothing of a 401 or 403 body, which may
// echo the credential it refused.
func upstreamAnswered(status int, body []byte) string {
	msg := "upstream answered " + strconv.Itoa(status)
	if status == 401 || status == 403 {
		return msg
	}
	return msg + ": " + redact(string(excerpt(body, 512)))
}

// excerpt is the part of an upstream's body a message quotes: at most its
// first n bytes, without the white space around them (an error body's
// final newline would end the record's error with it).
func excerpt(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = bytes.TrimSpace(b[:n])
	}
	return b
}
