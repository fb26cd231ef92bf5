package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// Dist is a distribution of lengths in tokens: fixed (Min == Max) or
// uniform over [Min, Max].
type Dist struct{ Min, Max int }

// maxDistTokens bounds a length: no model has a longer context.
const maxDistTokens = 1 << 22

// ParseDist parses "N" (fixed) or "A:B" (uniform over A..B inclusive).
// Lengths are between 0 and 4 Mi tokens and A <= B.
func ParseDist(s string) (Dist, error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), ":")
	lo, err := parseLen(a)
	if err != nil {
		return Dist{}, fmt.Errorf("length %q: %w", s, err)
	}
	hi := lo
	if isRange {
		if hi, err = parseLen(b); err != nil {
			return Dist{}, fmt.Errorf("length %q: %w", s, err)
		}
		if hi < lo {
			return Dist{}, fmt.Errorf("length %q: range upside down", s)
		}
	}
	return Dist{lo, hi}, nil
}

func parseLen(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, errors.New("not a whole number")
	}
	if n < 0 || n > maxDistTokens {
		return 0, fmt.Errorf("out of range 0..%d", maxDistTokens)
	}
	return n, nil
}

// Sample draws a length.
func (d Dist) Sample(r *rand.Rand) int {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + r.IntN(d.Max-d.Min+1)
}

// String is the form ParseDist reads.
func (d Dist) String() string {
	if d.Min == d.Max {
		return strconv.Itoa(d.Min)
	}
	return strconv.Itoa(d.Min) + ":" + strconv.Itoa(d.Max)
}

// Set implements flag.Value.
func (d *Dist) Set(s string) error {
	v, err := ParseDist(s)
	if err == nil {
		*d = v
	}
	return err
}

// ParseHeader parses one "Key: Value" header as curl's -H takes it. The key
// must be a valid HTTP token; the value is trimmed and must not contain
// control characters other than tab.
func ParseHeader(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", fmt.Errorf("header %q: want \"Key: Value\"", s)
	}
	k = strings.TrimSpace(k)
	if k == "" {
		return "", "", fmt.Errorf("header %q: empty name", s)
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return "", "", fmt.Errorf("header %q: invalid character %q in name", s, k[i])
		}
	}
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", fmt.Errorf("header %q: control character in value", s)
		}
	}
	return textproto.CanonicalMIMEHeaderKey(k), v, nil
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110 §5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Headers is a repeatable -H flag: each value is added to the header.
type Headers http.Header

// String implements flag.Value.
func (h Headers) String() string {
	var b strings.Builder
	for k, vs := range h {
		for _, v := range vs {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k + ": " + v)
		}
	}
	return b.String()
}

// Set implements flag.Value.
func (h Headers) Set(s string) error {
	k, v, err := ParseHeader(s)
	if err != nil {
		return err
	}
	http.Header(h).Add(k, v)
	return nil
}

// Prompt is one request's input from a prompts file: either Text (sent as
// the single user message of a chat, or as the completion prompt) or
// Messages (sent as is to /v1/chat/completions; for /v1/completions their
// text contents are joined).
type Prompt struct {
	Text     string
	Messages json.RawMessage
}

// maxPromptLine bounds one line of a prompts file.
const maxPromptLine = 16 << 20

// ReadPrompts reads a JSONL prompts file: one object per line with a
// "prompt" string or a "messages" array (a non-empty array of objects with
// a "role"). Blank lines and lines starting with '#' are skipped. An error
// names the line. An empty file is an error.
func ReadPrompts(r io.Reader) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxPromptLine)
	var out []Prompt
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if s := strings.TrimSpace(string(b)); s == "" || s[0] == '#' {
			continue
		}
		var v struct {
			Prompt   *string         `json:"prompt"`
			Messages json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("prompts line %d: %w", line, err)
		}
		switch {
		case v.Prompt != nil && len(v.Messages) > 0:
			return nil, fmt.Errorf("prompts line %d: both \"prompt\" and \"messages\"", line)
		case v.Prompt != nil:
			out = append(out, Prompt{Text: *v.Prompt})
		case len(v.Messages) > 0:
			var msgs []struct {
				Role *string `json:"role"`
			}
			if err := json.Unmarshal(v.Messages, &msgs); err != nil || len(msgs) == 0 {
				return nil, fmt.Errorf("prompts line %d: \"messages\" must be a non-empty array of messages", line)
			}
			for i, m := range msgs {
				if m.Role == nil {
					return nil, fmt.Errorf("prompts line %d: message %d has no \"role\"", line, i)
				}
			}
			out = append(out, Prompt{Messages: append(json.RawMessage(nil), v.Messages...)})
		default:
			return nil, fmt.Errorf("prompts line %d: want {\"prompt\": \"...\"} or {\"messages\": [...]}", line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("prompts: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("prompts: no prompt in the file")
	}
	return out, nil
}

// completionText joins the text content of chat messages, for sending a
// messages prompt to /v1/completions.
func (p Prompt) completionText() string {
	if p.Messages == nil {
		return p.Text
	}
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(p.Messages, &msgs) // validated by ReadPrompts
	var b strings.Builder
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(s)
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				if p.Text != "" {
					if b.Len() > 0 {
						b.WriteByte('\n')
					}
					b.WriteString(p.Text)
				}
			}
		}
	}
	return b.String()
}
