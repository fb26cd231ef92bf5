package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/endreason"
)

// Endpoint is the OpenAI API a request body is for.
type Endpoint uint8

// The endpoints CheckRequest knows.
const (
	Chat        Endpoint = iota // /v1/chat/completions: messages
	Completions                 // /v1/completions: prompt
)

// Request is what the proxy needs from a valid completion request.
type Request struct {
	// Model is the requested model. It aliases the parser's memory: valid
	// until the parser parses again; copy it to keep it.
	Model []byte
	// Route is the route the model matched (never nil for a valid request).
	Route *Route
	// Stream: the client asked for an event stream.
	Stream bool
	// IncludeUsage: stream_options.include_usage was true.
	IncludeUsage bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when the
	// request sets neither.
	MaxTokens int
	// PromptTokens estimates the prompt: ~4 bytes of text per token plus a
	// few per message. An estimate for quota admission, not a tokenizer.
	PromptTokens int
}

// Reserve is the tokens to admit the request with: the prompt estimate plus
// the completion it may produce (MaxTokens, else the route's max_tokens
// cap, else nothing: then only Settle charges the completion).
func (r *Request) Reserve() int {
	out := r.MaxTokens
	if out == 0 && r.Route != nil {
		out = r.Route.MaxTokens
	}
	return r.PromptTokens + out
}

// Estimation constants: ~4 bytes of English text per token (OpenAI's rule
// of thumb), 4 tokens of framing per chat message, 3 to prime the reply,
// and 85 tokens for an image part (a low-detail image in OpenAI's pricing).
const (
	bytesPerToken    = 4
	tokensPerMessage = 4
	tokensPerReply   = 3
	tokensPerImage   = 85
)

// CheckRequest validates a chat or completions request body with p (the
// caller's parser, so the result may alias it and nothing is allocated on
// success) and returns what the proxy needs, or a 400 Rejection naming the
// parameter (Param) that is wrong: malformed JSON or not an object
// (malformed_request_body), a body over max_body_bytes
// (request_body_too_large), a missing or unknown model (unknown_model), or
// max_tokens / max_completion_tokens < 1 or over the route's cap,
// temperature outside [0, 2], top_p outside (0, 1], n outside [1, max_n],
// stream or stream_options.include_usage not a boolean, missing messages or
// prompt (invalid_parameter). Other parameters pass through unchecked:
// engines have their own extensions.
func (s *Snapshot) CheckRequest(p *fastjson.Parser, ep Endpoint, body []byte) (Request, *Rejection) {
	if len(body) > s.cfg.MaxBodyBytes {
		return Request{}, &Rejection{
			Status: 400, Type: "invalid_request_error", Code: "request_too_large",
			Message: "request body of " + strconv.Itoa(len(body)) + " bytes is over the limit of " +
				strconv.Itoa(s.cfg.MaxBodyBytes),
			Reason: endreason.InvalidRequest, Detail: endreason.DetailRequestBodyTooLarge,
		}
	}
	v, err := p.ParseBytes(body)
	if err != nil {
		return Request{}, malformed("We could not parse the JSON body of your request: " + jsonSyntaxReason(body, err) + ".")
	}
	o, err := v.Object()
	if err != nil {
		return Request{}, malformed("The request body must be a JSON object.")
	}
	var (
		req                           Request
		rej                           *Rejection
		model, maxTok, maxCompl, n    *fastjson.Value
		temp, topP, input, streamOpts *fastjson.Value
		textBytes, parts              int
	)
	inputName := "messages"
	if ep == Completions {
		inputName = "prompt"
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "model":
			model = v
		case "max_tokens":
			maxTok = v
		case "max_completion_tokens":
			maxCompl = v
		case "n":
			n = v
		case "temperature":
			temp = v
		case "top_p":
			topP = v
		case "stream":
			switch v.Type() {
			case fastjson.TypeTrue:
				req.Stream = true
			case fastjson.TypeFalse, fastjson.TypeNull:
			default:
				if rej == nil {
					rej = invalidParam("stream", "stream must be a boolean, got "+v.Type().String()+".")
				}
			}
		case "stream_options":
			streamOpts = v
		case "tools", "functions":
			textBytes += countText(v, &parts)
		default:
			if string(k) == inputName {
				input = v
			}
		}
	})
	if rej != nil {
		return Request{}, rej
	}

	switch {
	case model == nil || model.Type() == fastjson.TypeNull:
		return Request{}, invalidParam("model", "you must provide a model parameter")
	case model.Type() != fastjson.TypeString:
		return Request{}, invalidParam("model", "model must be a string.")
	}
	req.Model, _ = model.StringBytes()
	if req.Route = s.route(req.Model); req.Route == nil {
		return Request{}, &Rejection{
			Status: 400, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("The model %q does not exist or is not served here.", req.Model),
			Reason:  endreason.InvalidRequest, Detail: endreason.DetailUnknownModel,
		}
	}
	rt := req.Route

	if input == nil || input.Type() == fastjson.TypeNull {
		return Request{}, invalidParam(inputName, "you must provide "+inputName+".")
	}
	switch ep {
	case Chat:
		msgs, err := input.Array()
		if err != nil || len(msgs) == 0 {
			return Request{}, invalidParam("messages", "messages must be a non-empty array.")
		}
		for _, m := range msgs {
			if m.Type() != fastjson.TypeObject {
				return Request{}, invalidParam("messages", "each message must be an object.")
			}
			textBytes += countText(m, &parts)
		}
		req.PromptTokens = tokensPerReply + tokensPerMessage*len(msgs)
	case Completions:
		switch input.Type() {
		case fastjson.TypeString, fastjson.TypeArray:
		default:
			return Request{}, invalidParam("prompt", "prompt must be a string or an array.")
		}
		textBytes += countText(input, &parts)
	}
	req.PromptTokens += (textBytes+bytesPerToken-1)/bytesPerToken + parts*tokensPerImage

	if maxCompl != nil && maxCompl.Type() != fastjson.TypeNull {
		if req.MaxTokens, rej = tokenLimit("max_completion_tokens", maxCompl, rt.MaxTokens); rej != nil {
			return Request{}, rej
		}
	}
	if maxTok != nil && maxTok.Type() != fastjson.TypeNull {
		mt, rej := tokenLimit("max_tokens", maxTok, rt.MaxTokens)
		if rej != nil {
			return Request{}, rej
		}
		if req.MaxTokens == 0 { // max_completion_tokens wins, as in OpenAI's API
			req.MaxTokens = mt
		}
	}
	if n != nil && n.Type() != fastjson.TypeNull {
		nv, err := n.Int()
		if n.Type() != fastjson.TypeNumber || err != nil {
			return Request{}, invalidParam("n", "n must be an integer.")
		}
		if nv < 1 || nv > rt.MaxN {
			return Request{}, invalidParam("n", nRange(nv, rt.MaxN))
		}
	}
	if temp != nil && temp.Type() != fastjson.TypeNull {
		t, err := temp.Float64()
		if temp.Type() != fastjson.TypeNumber || err != nil {
			return Request{}, invalidParam("temperature", "temperature must be a number.")
		}
		if !(t >= 0 && t <= 2) {
			return Request{}, invalidParam("temperature", fmt.Sprintf("temperature is %g; it must be between 0 and 2.", t))
		}
	}
	if topP != nil && topP.Type() != fastjson.TypeNull {
		t, err := topP.Float64()
		if topP.Type() != fastjson.TypeNumber || err != nil {
			return Request{}, invalidParam("top_p", "top_p must be a number.")
		}
		if !(t > 0 && t <= 1) {
			return Request{}, invalidParam("top_p", fmt.Sprintf("top_p is %g; it must be greater than 0 and at most 1.", t))
		}
	}
	if streamOpts != nil && streamOpts.Type() != fastjson.TypeNull {
		so, err := streamOpts.Object()
		if err != nil {
			return Request{}, invalidParam("stream_options", "stream_options must be an object.")
		}
		if iu := so.Get("include_usage"); iu != nil {
			switch iu.Type() {
			case fastjson.TypeTrue:
				req.IncludeUsage = true
			case fastjson.TypeFalse, fastjson.TypeNull:
			default:
				return Request{}, invalidParam("stream_options.include_usage", "include_usage must be a boolean.")
			}
		}
	}
	return req, nil
}

// jsonSyntaxReason says briefly why body is not JSON and where: the first
// error encoding/json finds, with its position ("at byte N", counting from
// 1; with the line and column when the body spans lines), or "the body is
// empty", or that it ends too early. fastjson's own error (fastErr) names
// its internals and dumps the unparsed tail, so it is only the fallback,
// shortened to its innermost reason, for the few bodies encoding/json
// accepts and fastjson does not (nesting deeper than fastjson's limit).
// Only rejected bodies come here: the cost of a second parse is theirs.
func jsonSyntaxReason(body []byte, fastErr error) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return "the body is empty"
	}
	var raw json.RawMessage
	var se *json.SyntaxError
	if err := json.Unmarshal(body, &raw); errors.As(err, &se) {
		off := int(min(max(se.Offset, 0), int64(len(body))))
		if off >= len(body) && strings.HasPrefix(se.Error(), "unexpected end") {
			return "the body ends before the JSON value does (after " + strconv.Itoa(len(body)) + " bytes)"
		}
		return se.Error() + " " + bytePosition(body, off)
	}
	msg := fastErr.Error()
	if i := strings.Index(msg, "; unparsed tail: "); i >= 0 {
		msg = msg[:i]
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// bytePosition names the byte that ends body[:off] (the one the JSON
// decoder stopped at): "at byte N", plus its line and column when the body
// spans lines.
func bytePosition(body []byte, off int) string {
	pos := "at byte " + strconv.Itoa(off)
	if off < 1 || bytes.IndexByte(body, '\n') < 0 {
		return pos
	}
	before := body[:off-1]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := off - (bytes.LastIndexByte(before, '\n') + 1)
	return pos + " (line " + strconv.Itoa(line) + ", column " + strconv.Itoa(col) + ")"
}

// nRange is the message for an n outside [1, maxN].
func nRange(n, maxN int) string {
	if maxN == 1 {
		return fmt.Sprintf("n must be 1 for this model; got %d.", n)
	}
	return fmt.Sprintf("n must be between 1 and %d for this model; got %d.", maxN, n)
}

func malformed(msg string) *Rejection {
	return &Rejection{
		Status: 400, Type: "invalid_request_error", Code: "invalid_json", Message: msg,
		Reason: endreason.InvalidRequest, Detail: endreason.DetailMalformedRequest,
	}
}

// tokenLimit checks a max_tokens-style parameter against the route's cap
// (0: none).
func tokenLimit(name string, v *fastjson.Value, limit int) (int, *Rejection) {
	n, err := v.Int()
	if v.Type() != fastjson.TypeNumber || err != nil {
		return 0, invalidParam(name, name+" must be an integer.")
	}
	if n < 1 {
		return 0, invalidParam(name, fmt.Sprintf("%s is %d; it must be at least 1.", name, n))
	}
	if limit > 0 && n > limit {
		return 0, invalidParam(name, fmt.Sprintf("%s is too large: %d. This model supports at most %d completion tokens.", name, n, limit))
	}
	return n, nil
}

// countText returns the bytes of text in v (every string, object keys
// excepted; a number in an array counts as one token id) and adds the image
// parts it finds to parts.
func countText(v *fastjson.Value, parts *int) int {
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		return len(b)
	case fastjson.TypeArray:
		a, _ := v.Array()
		n := 0
		for _, e := range a {
			if e.Type() == fastjson.TypeNumber {
				n += bytesPerToken // a token id
				continue
			}
			n += countText(e, parts)
		}
		return n
	case fastjson.TypeObject:
		o, _ := v.Object()
		n := 0
		o.Visit(func(k []byte, e *fastjson.Value) {
			switch string(k) {
			case "image_url", "input_audio", "video_url":
				*parts++
			case "type", "role":
				// Framing, counted per message.
			default:
				n += countText(e, parts)
			}
		})
		return n
	}
	return 0
}
