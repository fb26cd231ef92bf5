package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	// SLO is the request's TTFT SLO (Route.SLO; 0: none), and Spent the
	// time it spent before routing, when the caller sets them before
	// Choose: a least_ttft pool places a new prompt, or keeps a request
	// where its prefix is held, only where it is predicted within what is
	// left of the SLO, and probes an upstream it has a model of only
	// without one.
	SLO, Spent time.Duration
	// prompt is the prompt's chain, for a least_ttft pool's Choose (nil in
	// any other pool); Release gives it back.
	prompt *prompt
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

// BodyTooLarge is the 413 Rejection of a request body over limit bytes
// (request_body_too_large).
func BodyTooLarge(limit int) *Rejection {
	return &Rejection{
		Status: 413, Type: "invalid_request_error", Code: "request_too_large",
		Message: "The request body is over the limit of " + strconv.Itoa(limit) + " bytes.",
		Reason:  endreason.InvalidRequest, Detail: endreason.DetailRequestBodyTooLarge,
	}
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
// success) and returns what the proxy needs (for a least_ttft pool, the
// prompt's chain too, in a pooled buffer: Release it once the request is
// routed), or a 400 Rejection naming the
// parameter (Param) that is wrong: malformed JSON or not an object
// (malformed_request_body), a body over max_body_bytes (BodyTooLarge, the
// one 413), a missing or unknown model (unknown_model), or
// max_tokens / max_completion_tokens < 1 or over the route's cap,
// temperature outside [0, 2], top_p outside (0, 1], n outside [1, max_n],
// stream or stream_options.include_usage not a boolean, missing messages or
// prompt (invalid_parameter). Other parameters pass through unchecked:
// engines have their own extensions. With a Rejection, the Request holds
// only Model: the model the body names, if it names one as a string (even
// one no route serves), so that the refusal's record can name it too.
func (s *Snapshot) CheckRequest(p *fastjson.Parser, ep Endpoint, body []byte) (Request, *Rejection) {
	if len(body) > s.cfg.MaxBodyBytes {
		return Request{}, BodyTooLarge(s.cfg.MaxBodyBytes)
	}
	v, err := p.ParseBytes(body)
	if err != nil {
		return Request{}, malformed("We could not parse the JSON body of your request: " + jsonSyntaxReason(body, err) + ".")
	}
	o, err := v.Object()
	if err != nil {
		return Request{}, malformed("The request body must be a JSON object.")
	}
	var f requestFields
	f.read(o, ep.inputName())
	req := Request{Model: modelName(f.model), Stream: f.stream}
	if rej := s.checkFields(ep, &f, &req); rej != nil {
		return Request{Model: req.Model}, rej
	}
	if req.Route.Pool.kind == policyLeastTTFT {
		req.prompt = newPrompt(ep, req.Model, f.input)
	}
	return req, nil
}

// checkFields checks the fields of a body that names req.Model and fills
// in the rest of req.
func (s *Snapshot) checkFields(ep Endpoint, f *requestFields, req *Request) *Rejection {
	if f.badStream != nil {
		return f.badStream
	}
	var rej *Rejection
	if req.Route, rej = s.modelRoute(f.model, req.Model); rej != nil {
		return rej
	}
	if req.PromptTokens, rej = promptTokens(ep, f); rej != nil {
		return rej
	}
	if req.MaxTokens, rej = maxTokens(f, req.Route.MaxTokens); rej != nil {
		return rej
	}
	if rej = checkSampling(f, req.Route.MaxN); rej != nil {
		return rej
	}
	req.IncludeUsage, rej = includeUsage(f.streamOptions)
	return rej
}

// inputName is the parameter that carries the prompt on ep.
func (ep Endpoint) inputName() string {
	if ep == Completions {
		return "prompt"
	}
	return "messages"
}

// requestFields are the top-level fields of a request body that
// CheckRequest checks, as one pass over the body found them (nil: absent;
// the last of repeated keys, as encoding/json reads them).
type requestFields struct {
	model, maxTokens, maxCompletionTokens, n *fastjson.Value
	temperature, topP, input, streamOptions  *fastjson.Value
	stream                                   bool       // stream was true
	badStream                                *Rejection // the first stream value that is not a boolean or null
	textBytes, parts                         int        // text and image parts of tools and functions
}

// read fills f from the body's object o; inputName is the endpoint's
// prompt parameter.
func (f *requestFields) read(o *fastjson.Object, inputName string) {
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) {
		case "model":
			f.model = v
		case "max_tokens":
			f.maxTokens = v
		case "max_completion_tokens":
			f.maxCompletionTokens = v
		case "n":
			f.n = v
		case "temperature":
			f.temperature = v
		case "top_p":
			f.topP = v
		case "stream":
			switch v.Type() {
			case fastjson.TypeTrue:
				f.stream = true
			case fastjson.TypeFalse, fastjson.TypeNull:
			default:
				if f.badStream == nil {
					f.badStream = invalidParam("stream", "stream must be a boolean, got "+v.Type().String()+".")
				}
			}
		case "stream_options":
			f.streamOptions = v
		case "tools", "functions":
			f.textBytes += countText(v, &f.parts)
		default:
			if string(k) == inputName {
				f.input = v
			}
		}
	})
}

// set reports whether a parameter is present and not null.
func set(v *fastjson.Value) bool { return v != nil && v.Type() != fastjson.TypeNull }

// modelName is the model the body names: model's string, nil when model
// is absent or not a string.
func modelName(model *fastjson.Value) []byte {
	if model == nil || model.Type() != fastjson.TypeString {
		return nil
	}
	name, _ := model.StringBytes()
	return name
}

// modelRoute checks the model parameter, whose string is name, and finds
// its route.
func (s *Snapshot) modelRoute(model *fastjson.Value, name []byte) (*Route, *Rejection) {
	switch {
	case !set(model):
		return nil, invalidParam("model", "you must provide a model parameter")
	case model.Type() != fastjson.TypeString:
		return nil, invalidParam("model", "model must be a string.")
	}
	rt := s.route(name)
	if rt == nil {
		return nil, &Rejection{
			Status: 400, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("The model %q does not exist or is not served here.", name),
			Reason:  endreason.InvalidRequest, Detail: endreason.DetailUnknownModel,
		}
	}
	return rt, nil
}

// promptTokens checks the messages or prompt parameter and estimates the
// prompt's tokens from it and the tools f counted.
func promptTokens(ep Endpoint, f *requestFields) (int, *Rejection) {
	inputName := ep.inputName()
	if !set(f.input) {
		return 0, invalidParam(inputName, "you must provide "+inputName+".")
	}
	textBytes, parts, framing := f.textBytes, f.parts, 0
	switch ep {
	case Chat:
		msgs, err := f.input.Array()
		if err != nil || len(msgs) == 0 {
			return 0, invalidParam("messages", "messages must be a non-empty array.")
		}
		for _, m := range msgs {
			if m.Type() != fastjson.TypeObject {
				return 0, invalidParam("messages", "each message must be an object.")
			}
			textBytes += countText(m, &parts)
		}
		framing = tokensPerReply + tokensPerMessage*len(msgs)
	case Completions:
		switch f.input.Type() {
		case fastjson.TypeString, fastjson.TypeArray:
		default:
			return 0, invalidParam("prompt", "prompt must be a string or an array.")
		}
		textBytes += countText(f.input, &parts)
	}
	return framing + (textBytes+bytesPerToken-1)/bytesPerToken + parts*tokensPerImage, nil
}

// maxTokens checks max_completion_tokens and max_tokens against the
// route's cap (0: none) and returns the one that wins, as in OpenAI's API:
// max_completion_tokens, else max_tokens, else 0.
func maxTokens(f *requestFields, limit int) (int, *Rejection) {
	n := 0
	if set(f.maxCompletionTokens) {
		var rej *Rejection
		if n, rej = tokenLimit("max_completion_tokens", f.maxCompletionTokens, limit); rej != nil {
			return 0, rej
		}
	}
	if set(f.maxTokens) {
		mt, rej := tokenLimit("max_tokens", f.maxTokens, limit)
		if rej != nil {
			return 0, rej
		}
		if n == 0 {
			n = mt
		}
	}
	return n, nil
}

// checkSampling checks n against [1, maxN], temperature against [0, 2]
// and top_p against (0, 1].
func checkSampling(f *requestFields, maxN int) *Rejection {
	if set(f.n) {
		nv, err := f.n.Int()
		if f.n.Type() != fastjson.TypeNumber || err != nil {
			return invalidParam("n", "n must be an integer.")
		}
		if nv < 1 || nv > maxN {
			return invalidParam("n", nRange(nv, maxN))
		}
	}
	if set(f.temperature) {
		t, err := f.temperature.Float64()
		if f.temperature.Type() != fastjson.TypeNumber || err != nil {
			return invalidParam("temperature", "temperature must be a number.")
		}
		if !(t >= 0 && t <= 2) {
			return invalidParam("temperature", fmt.Sprintf("temperature is %g; it must be between 0 and 2.", t))
		}
	}
	if set(f.topP) {
		t, err := f.topP.Float64()
		if f.topP.Type() != fastjson.TypeNumber || err != nil {
			return invalidParam("top_p", "top_p must be a number.")
		}
		if !(t > 0 && t <= 1) {
			return invalidParam("top_p", fmt.Sprintf("top_p is %g; it must be greater than 0 and at most 1.", t))
		}
	}
	return nil
}

// includeUsage checks stream_options and returns its include_usage.
func includeUsage(streamOptions *fastjson.Value) (bool, *Rejection) {
	if !set(streamOptions) {
		return false, nil
	}
	so, err := streamOptions.Object()
	if err != nil {
		return false, invalidParam("stream_options", "stream_options must be an object.")
	}
	switch iu := so.Get("include_usage"); {
	case iu == nil:
		return false, nil
	case iu.Type() == fastjson.TypeTrue:
		return true, nil
	case iu.Type() == fastjson.TypeFalse, iu.Type() == fastjson.TypeNull:
		return false, nil
	}
	return false, invalidParam("stream_options.include_usage", "include_usage must be a boolean.")
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
