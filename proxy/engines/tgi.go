package engines

import (
	"bytes"
	"strconv"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// TGIReader reads Hugging Face text-generation-inference (maintenance mode).
// Timing comes only in the headers of NON-streamed responses (native
// /generate and non-streamed chat; huggingface/text-generation-inference
// router/src/server.rs generate_internal), integer milliseconds:
//
//   - x-queue-time → EngineQueue
//   - x-validation-time → EngineTokenize (validation: tokenization and
//     parameter checks)
//   - x-inference-time is prefill plus the whole decode and cannot be split:
//     it is not recorded (putting it in prefill would swallow the decode);
//     x-total-time, x-time-per-token likewise.
//
// Streams carry only x-compute-type and x-compute-characters: nothing is
// recorded and the upstream window stays unsplit.
//
// Events: the OpenAI-compatible path (finish_reason "stop_sequence" passes
// through unchanged and reads as stop; mid-stream errors {"error": {...}}),
// and the native one: /generate_stream events {"token": {"text", "special"},
// "generated_text", "details": {"finish_reason": length|eos_token|
// stop_sequence, "generated_tokens", "input_length"}}, errors
// {"error": "...", "error_type": "..."}, and the whole /generate body
// {"generated_text", "details"}.
//
// The native stream has no [DONE]: its last event is the one whose
// generated_text is a string (null on every other), and it is read as the
// end marker. Its details, and so its finish reason, are there only when the
// request asked for them ("details": true; the default is false). The whole
// /generate body's details have no input_length: the prompt's token count
// is taken from the x-prompt-tokens header.
type TGIReader struct {
	promptTokens int // x-prompt-tokens, for a body whose details lack input_length
}

// Kind returns "tgi".
func (*TGIReader) Kind() string { return KindTGI }

// Header reads x-queue-time and x-validation-time, and remembers
// x-prompt-tokens.
func (r *TGIReader) Header(h func(string) []byte, tl *stages.Timeline) bool {
	if n, ok := headerCount(h("X-Prompt-Tokens")); ok {
		r.promptTokens = n
	}
	const ms = time.Millisecond
	n := false
	if d, ok := headerDur(h("X-Queue-Time"), ms); ok {
		setEngine(tl, stages.EngineQueue, d)
		n = true
	}
	if d, ok := headerDur(h("X-Validation-Time"), ms); ok {
		setEngine(tl, stages.EngineTokenize, d)
		n = true
	}
	return n && tl != nil
}

// headerDur parses a header value as a non-negative number of unit.
func headerDur(v []byte, unit time.Duration) (time.Duration, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || len(v) > 32 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return toDur(f, unit)
}

// headerCount parses a header value as a count: up to nine decimal digits.
func headerCount(v []byte) (int, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || len(v) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// Event reads an OpenAI-compatible or native chunk or body.
func (r *TGIReader) Event(data []byte, _ *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event {
		ev = readOpenAIExt(v, ev)
		if t := v.Get("token"); t != nil && t.Type() == jsonObject {
			if len(t.GetStringBytes("text")) > 0 && !t.GetBool("special") {
				ev.Content = true
			}
			if g := v.Get("generated_text"); g != nil && g.Type() == jsonString {
				ev.Done = true // the last /generate_stream event
			}
		} else if len(v.GetStringBytes("generated_text")) > 0 {
			ev.Content = true // a whole /generate body
		}
		if d := v.Get("details"); d != nil && d.Type() == jsonObject {
			if f := endreason.ParseFinish(d.GetStringBytes("finish_reason")); f != endreason.FinishNone {
				ev.Finish = f
			}
			if c, ok := intField(d, "generated_tokens"); ok && !ev.Usage {
				ev.Usage, ev.CompletionTokens = true, c
				p, ok := intField(d, "input_length")
				if !ok {
					p = r.promptTokens
				}
				ev.PromptTokens = p
			}
		}
		return ev
	})
}

// Reset forgets the x-prompt-tokens header.
func (r *TGIReader) Reset() { r.promptTokens = 0 }
