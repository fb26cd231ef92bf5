package refengine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// apiError is an OpenAI-shaped error with its HTTP status.
type apiError struct {
	status int
	msg    string
	typ    string
	param  string // empty: null
	code   string // empty: null
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), typ: "invalid_request_error", param: param}
}

// appendError renders {"error":{"message":...,"type":...,"param":...,"code":...}}.
func (e *apiError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, e.msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.typ)
	b = append(b, `,"param":`...)
	if e.param == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, e.param)
	}
	b = append(b, `,"code":`...)
	if e.code == "" {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, e.code)
	}
	return append(b, "}}"...)
}

func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Trailer")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(e.appendJSON(nil), '\n'))
}

// contentPart is one piece of a chat message: text, or an image to fetch.
type contentPart struct {
	text     string
	imageURL string
	image    []byte // filled by the media stage
}

// chatMessage is one decoded chat message.
type chatMessage struct {
	Role  string
	parts []contentPart
}

func (m *chatMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
		return nil
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return err
		}
		m.parts = []contentPart{{text: s}}
		return nil
	case c[0] == '[':
		var parts []struct {
			Type     string          `json:"type"`
			Text     *string         `json:"text"`
			ImageURL json.RawMessage `json:"image_url"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return err
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				if p.Text == nil {
					return fmt.Errorf("content part of type text has no text")
				}
				m.parts = append(m.parts, contentPart{text: *p.Text})
			case "image_url":
				var u struct {
					URL string `json:"url"`
				}
				iu := bytes.TrimSpace(p.ImageURL)
				if len(iu) > 0 && iu[0] == '"' {
					if err := json.Unmarshal(iu, &u.URL); err != nil {
						return err
					}
				} else if err := json.Unmarshal(iu, &u); err != nil {
					return fmt.Errorf("content part image_url: %v", err)
				}
				if u.URL == "" {
					return fmt.Errorf("content part of type image_url has no url")
				}
				m.parts = append(m.parts, contentPart{imageURL: u.URL})
			default:
				return fmt.Errorf("unsupported content part type %q", p.Type)
			}
		}
		return nil
	default:
		return fmt.Errorf("content must be a string or an array of content parts")
	}
}

// wireRequest is the union of the chat and completion request bodies.
type wireRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	N                   *int            `json:"n"`
	Stream              *bool           `json:"stream"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// apiRequest is a decoded, validated generation request.
type apiRequest struct {
	chat         bool
	model        string
	messages     []chatMessage // chat
	prompt       string        // completions, text prompt
	promptIDs    []int         // completions, token prompt (nil if text)
	maxTokens    int           // 0: default
	temperature  float32
	topP         float32
	seed         *int64
	stop         []string
	stream       bool
	includeUsage bool
	ignoreEOS    bool // vLLM extension: generate max_tokens tokens regardless of EOS
}

const maxStops = 16

// decodeRequest parses and validates a /v1/chat/completions (chat) or
// /v1/completions body. Errors are OpenAI 400s naming the parameter.
func decodeRequest(body []byte, chat bool) (*apiRequest, *apiError) {
	var wr wireRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&wr); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return nil, badRequest("", "invalid JSON body: trailing data")
	}
	r := &apiRequest{chat: chat, model: wr.Model, temperature: 1, topP: 1, seed: wr.Seed, ignoreEOS: wr.IgnoreEOS}
	if chat {
		if len(wr.Messages) == 0 {
			return nil, badRequest("messages", "messages must be a non-empty array")
		}
		for i, m := range wr.Messages {
			switch m.Role {
			case "system", "developer", "user", "assistant", "tool":
			default:
				return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "unsupported role %q", m.Role)
			}
		}
		r.messages = wr.Messages
	} else {
		if err := r.decodePrompt(wr.Prompt); err != nil {
			return nil, err
		}
	}
	if wr.N != nil && *wr.N != 1 {
		return nil, badRequest("n", "only n=1 is supported, got %d", *wr.N)
	}
	mt := wr.MaxTokens
	if mt == nil {
		mt = wr.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *mt)
		}
		r.maxTokens = *mt
	}
	if t := wr.Temperature; t != nil {
		if *t < 0 || *t > 2 {
			return nil, badRequest("temperature", "temperature must be in [0, 2], got %v", *t)
		}
		r.temperature = float32(*t)
	}
	if p := wr.TopP; p != nil {
		if *p <= 0 || *p > 1 {
			return nil, badRequest("top_p", "top_p must be in (0, 1], got %v", *p)
		}
		r.topP = float32(*p)
	}
	if s := bytes.TrimSpace(wr.Stop); len(s) > 0 && string(s) != "null" {
		if s[0] == '"' {
			var one string
			if err := json.Unmarshal(s, &one); err != nil {
				return nil, badRequest("stop", "stop must be a string or an array of strings")
			}
			r.stop = []string{one}
		} else if err := json.Unmarshal(s, &r.stop); err != nil {
			return nil, badRequest("stop", "stop must be a string or an array of strings")
		}
		if len(r.stop) > maxStops {
			return nil, badRequest("stop", "at most %d stop sequences are supported", maxStops)
		}
		r.stop = dropEmpty(r.stop)
	}
	if wr.Stream != nil {
		r.stream = *wr.Stream
	}
	if wr.StreamOptions != nil {
		if !r.stream {
			return nil, badRequest("stream_options", "stream_options can only be set when stream is true")
		}
		r.includeUsage = wr.StreamOptions.IncludeUsage
	}
	return r, nil
}

func dropEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// decodePrompt accepts a string, a one-element string array, an array of
// token ids or a one-element array of token-id arrays.
func (r *apiRequest) decodePrompt(raw json.RawMessage) *apiError {
	p := bytes.TrimSpace(raw)
	if len(p) == 0 || string(p) == "null" {
		return badRequest("prompt", "prompt is required")
	}
	if p[0] == '"' {
		if err := json.Unmarshal(p, &r.prompt); err != nil {
			return badRequest("prompt", "invalid prompt: %v", err)
		}
		return nil
	}
	var strs []string
	if json.Unmarshal(p, &strs) == nil {
		if len(strs) != 1 {
			return badRequest("prompt", "only one prompt per request is supported, got %d", len(strs))
		}
		r.prompt = strs[0]
		return nil
	}
	var ids []int
	if json.Unmarshal(p, &ids) == nil {
		if len(ids) == 0 {
			return badRequest("prompt", "prompt must not be empty")
		}
		r.promptIDs = ids
		return nil
	}
	var nested [][]int
	if json.Unmarshal(p, &nested) == nil {
		if len(nested) != 1 || len(nested[0]) == 0 {
			return badRequest("prompt", "only one non-empty token prompt per request is supported")
		}
		r.promptIDs = nested[0]
		return nil
	}
	return badRequest("prompt", "prompt must be a string, an array with one string, or an array of token ids")
}

// appendJSONString appends s as a JSON string literal. Unlike encoding/json
// it does not escape <, > and &, matching what OpenAI and vLLM send; invalid
// UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }
