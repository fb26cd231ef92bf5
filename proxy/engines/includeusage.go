package engines

import (
	"encoding/json"
	"errors"
)

// Errors of EnsureIncludeUsage. The relay forwards the body unchanged then.
var (
	ErrBodyNotJSON          = errors.New("engines: request body is not valid JSON")
	ErrBodyNotObject        = errors.New("engines: request body is not a JSON object")
	ErrStreamOptionsInvalid = errors.New("engines: stream_options is neither an object nor null")
)

const (
	includeUsageMember = `"include_usage":true`
	streamOptionsUsage = `"stream_options":{` + includeUsageMember + `}`
)

// EnsureIncludeUsage returns the request body with
// "stream_options":{"include_usage":true} set, so that vLLM sends its final
// usage chunk (which carries the per-request metrics), appending the result
// to dst (pass dst[:0] to reuse a buffer).
//
//   - "stream" is not true: vLLM (like OpenAI) rejects stream_options on a
//     non-streamed request, and a whole body carries usage anyway: out is
//     body, added false.
//   - no stream_options: the member is inserted first in the object.
//   - stream_options null: replaced by {"include_usage":true}.
//   - stream_options an object without include_usage: the member is
//     inserted first in it; with include_usage other than true: that value
//     is replaced by true. Other members (continuous_usage_stats…) are kept.
//   - include_usage already true: out is body, added false.
//
// Every other byte of body is kept as it was (no re-encoding: numbers,
// escapes, spacing and key order are untouched). A key repeated in the
// object is handled as Python's json (vLLM's parser) reads it: the last
// "stream" decides, and every "stream_options" is updated. On error (body
// not JSON, not an object, stream_options of another type) out is body and
// added false. When added is true the relay must drop the usage-only chunk
// before the client (IsUsageOnlyChunk, Event.UsageOnly) and fix
// Content-Length. Once per request: it allocates.
func EnsureIncludeUsage(body []byte, dst []byte) (out []byte, added bool, err error) {
	if !json.Valid(body) {
		return body, false, ErrBodyNotJSON
	}
	start := skipWS(body, 0)
	if body[start] != '{' {
		return body, false, ErrBodyNotObject
	}
	type span struct{ from, to int }
	stream := false
	var opts []span
	scanObject(body, start, func(key []byte, from, to int) {
		switch {
		case keyIs(key, "stream"):
			stream = string(body[from:to]) == "true"
		case keyIs(key, "stream_options"):
			opts = append(opts, span{from, to})
		}
	})
	if !stream {
		return body, false, nil
	}
	type edit struct {
		from, to int // body[from:to] is replaced by text
		text     string
	}
	var edits []edit
	if len(opts) == 0 {
		edits = append(edits, edit{start + 1, start + 1, streamOptionsUsage + sepBefore(body, start)})
	}
	for _, o := range opts {
		switch body[o.from] {
		case 'n':
			edits = append(edits, edit{o.from, o.to, "{" + includeUsageMember + "}"})
		case '{':
			found := false
			scanObject(body, o.from, func(key []byte, from, to int) {
				if keyIs(key, "include_usage") {
					found = true
					if string(body[from:to]) != "true" {
						edits = append(edits, edit{from, to, "true"})
					}
				}
			})
			if !found {
				edits = append(edits, edit{o.from + 1, o.from + 1, includeUsageMember + sepBefore(body, o.from)})
			}
		default:
			return body, false, ErrStreamOptionsInvalid
		}
	}
	if len(edits) == 0 {
		return body, false, nil
	}
	out = dst
	prev := 0
	for _, e := range edits { // in document order: scanning order
		out = append(out, body[prev:e.from]...)
		out = append(out, e.text...)
		prev = e.to
	}
	return append(out, body[prev:]...), true, nil
}

// sepBefore is the separator a member inserted first in the object at
// doc[open] == '{' needs before the existing members: none if it is empty.
func sepBefore(doc []byte, open int) string {
	if doc[skipWS(doc, open+1)] == '}' {
		return ""
	}
	return ","
}

// keyIs reports whether the raw (still escaped) key equals name.
func keyIs(raw []byte, name string) bool {
	for _, c := range raw {
		if c == '\\' {
			var s string
			q := make([]byte, 0, len(raw)+2)
			q = append(append(append(q, '"'), raw...), '"')
			return json.Unmarshal(q, &s) == nil && s == name
		}
	}
	return string(raw) == name
}

// The scanners below walk valid JSON only (json.Valid was checked).

// scanObject calls f for each member of the object at doc[open] == '{',
// with the key's raw bytes and the value's span, and returns the index just
// past the closing '}'.
func scanObject(doc []byte, open int, f func(key []byte, from, to int)) int {
	i := skipWS(doc, open+1)
	if doc[i] == '}' {
		return i + 1
	}
	for {
		kEnd := skipString(doc, i)
		key := doc[i+1 : kEnd-1]
		i = skipWS(doc, kEnd)
		i = skipWS(doc, i+1) // past ':'
		vEnd := skipValue(doc, i)
		f(key, i, vEnd)
		i = skipWS(doc, vEnd)
		if doc[i] == '}' {
			return i + 1
		}
		i = skipWS(doc, i+1) // past ','
	}
}

func skipWS(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string at doc[i] == '"'.
func skipString(doc []byte, i int) int {
	for i++; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the value starting at doc[i].
func skipValue(doc []byte, i int) int {
	switch doc[i] {
	case '"':
		return skipString(doc, i)
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				i = skipString(doc, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(doc) {
		switch doc[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}
