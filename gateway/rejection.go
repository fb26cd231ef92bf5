package gateway

import (
	"unicode/utf8"

	"github.com/ttftlens/ttftlens/endreason"
)

// Rejection is the gateway refusing a request: everything the proxy needs
// to answer it with an OpenAI-style error and to record why it ended. The
// gateway never sends anything itself. Some Rejections are shared: treat
// them as read-only.
type Rejection struct {
	// Status is the HTTP status for the client (400, 401, 429, 499, 503).
	Status int
	// RetryAfter, when > 0, is the Retry-After header in seconds.
	RetryAfter int
	// Type, Param, Code and Message are the OpenAI error body's fields
	// ({"error":{"message","type","param","code"}}); Param is "" for null.
	Type    string
	Param   string
	Code    string
	Message string
	// Reason and Detail are the record's end reason and detail.
	Reason endreason.Reason
	Detail endreason.Detail
}

func (r *Rejection) Error() string { return r.Message }

// AppendJSON appends the OpenAI error body of r to dst.
func (r *Rejection) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, r.Message)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, r.Type)
	dst = append(dst, `,"param":`...)
	if r.Param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, r.Param)
	}
	dst = append(dst, `,"code":`...)
	if r.Code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, r.Code)
	}
	return append(dst, "}}"...)
}

func invalidParam(param, msg string) *Rejection {
	return &Rejection{
		Status: 400, Type: "invalid_request_error", Param: param, Code: "invalid_value",
		Message: msg, Reason: endreason.InvalidRequest, Detail: endreason.DetailInvalidParam,
	}
}

// The shared rejections.
var (
	rejMissingKey = &Rejection{
		Status: 401, Type: "invalid_request_error", Code: "missing_api_key",
		Message: "You didn't provide an API key: send Authorization: Bearer <key>.",
		Reason:  endreason.PolicyBlock, Detail: endreason.DetailMissingKey,
	}
	rejInvalidKey = &Rejection{
		Status: 401, Type: "invalid_request_error", Code: "invalid_api_key",
		Message: "Incorrect API key provided.",
		Reason:  endreason.PolicyBlock, Detail: endreason.DetailInvalidKey,
	}
	rejClientGone = &Rejection{
		Status: 499, Type: "client_closed", Code: "client_closed",
		Message: "the client went away while queued",
		Reason:  endreason.ClientCancel, Detail: endreason.DetailClientClosed,
	}
)

// appendJSONString appends s as a JSON string (RFC 8259 §7); invalid UTF-8
// becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, "\\ufffd"...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}
