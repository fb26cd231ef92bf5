package engines

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fastjson"

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
type TGIReader struct {
	p fastjson.Parser
}

// Kind returns "tgi".
func (*TGIReader) Kind() string { return KindTGI }

// Header reads x-queue-time and x-validation-time.
func (*TGIReader) Header(h func(string) []byte, tl *stages.Timeline) bool {
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

// Event reads an OpenAI-compatible or native chunk or body.
func (r *TGIReader) Event(data []byte, _ *stages.Timeline) Event {
	ev, v := parseEvent(&r.p, data)
	if v == nil {
		return ev
	}
	readOpenAIExt(v, &ev)
	if t := v.Get("token"); t != nil && t.Type() == fastjson.TypeObject {
		if len(t.GetStringBytes("text")) > 0 && !t.GetBool("special") {
			ev.Content = true
		}
	} else if len(v.GetStringBytes("generated_text")) > 0 {
		ev.Content = true // a whole /generate body
	}
	if d := v.Get("details"); d != nil && d.Type() == fastjson.TypeObject {
		if f := endreason.ParseFinish(d.GetStringBytes("finish_reason")); f != endreason.FinishNone {
			ev.Finish = f
		}
		if c, ok := intField(d, "generated_tokens"); ok && !ev.Usage {
			ev.Usage, ev.CompletionTokens = true, c
			ev.PromptTokens, _ = intField(d, "input_length")
		}
	}
	return ev
}

// Reset does nothing: the reader keeps no per-request state.
func (*TGIReader) Reset() {}
