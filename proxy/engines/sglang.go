package engines

import (
	"bytes"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// SGLangReader reads SGLang's native /generate: SSE "data: {...}" events
// ending with "data: [DONE]" (or one JSON body), each with a top-level
// "text" and a "meta_info" object (sgl-project/sglang
// tokenizer_manager.py; req_time_stats.py convert_to_output_meta_info):
//
//   - content: "text" is CUMULATIVE by default (each event repeats all the
//     text so far; with the server flag --incremental-streaming-output it
//     is the new piece only). An event carries content when its text grew,
//     or is a new piece: longer than the previous event's, or with a
//     different start. A final event repeating the text is not content.
//   - finish: meta_info.finish_reason, an object {type: stop|length|abort,
//     matched?, message?, status_code?} (a plain string is accepted too),
//     null on all but the last event.
//   - usage: meta_info.prompt_tokens, completion_tokens (cumulative, on
//     every event), cached_tokens.
//   - durations (need --enable-metrics), SECONDS, on every event once
//     known: meta_info.queue_time → EngineQueue; prefill_finished_time −
//     forward_entry_time → EnginePrefill (both timestamps from the engine
//     host's clock, subtracted from each other only). A copy of the same
//     stamps under meta_info.time_stats is read when the top-level ones are
//     missing (queue = forward_entry_time − wait_queue_entry_time there).
//
// Caveat (a third-party patch to SGLang reports it): these values have been seen to arrive as
// 0 or None (lost on the scheduler→detokenizer→tokenizer hop): 0 and null
// are treated as not reported. Without a queue but with a prefill the
// event sets Inferred and InferQueue infers the queue at done.
//
// SGLang's OpenAI-compatible /v1 endpoints carry no timing; their chunks
// are read with the common OpenAI fields.
type SGLangReader struct {
	// Per choice index, the previous event's text length and first bytes.
	prev [sglangChoices]sglangText
}

const (
	sglangChoices = 8  // choice indexes tracked; higher ones: any text is content
	sglangPrefix  = 16 // bytes of the previous text kept to tell a new piece
)

type sglangText struct {
	n      int
	prefix [sglangPrefix]byte
	np     int
}

// Kind returns "sglang".
func (*SGLangReader) Kind() string { return KindSGLang }

// Header records nothing: SGLang sends no timing headers.
func (*SGLangReader) Header(h func(string) []byte, tl *stages.Timeline) bool { return noHeader(h, tl) }

// Event reads a native /generate event (or an OpenAI-compatible chunk).
func (r *SGLangReader) Event(data []byte, tl *stages.Timeline) Event {
	return readEvent(data, func(v *jsonValue, ev Event) Event {
		ev = readOpenAIExt(v, ev)
		m := v.Get("meta_info")
		if m == nil || m.Type() != jsonObject {
			return ev
		}
		if t := v.Get("text"); t != nil && t.Type() == jsonString {
			idx, _ := intField(v, "index")
			if r.grew(idx, t.GetStringBytes()) {
				ev.Content = true
			}
		}
		if f := m.Get("finish_reason"); f != nil {
			var fr endreason.Finish
			switch f.Type() {
			case jsonObject:
				fr = endreason.ParseFinish(f.GetStringBytes("type"))
			case jsonString:
				fr = endreason.ParseFinish(f.GetStringBytes())
			}
			if fr != endreason.FinishNone {
				ev.Finish = fr
			}
		}
		p, okp := intField(m, "prompt_tokens")
		c, okc := intField(m, "completion_tokens")
		if okp || okc {
			ev.Usage, ev.PromptTokens, ev.CompletionTokens = true, p, c
			ev.CachedTokens, ev.Cached = intField(m, "cached_tokens")
		}
		r.timing(m, tl, &ev)
		return ev
	})
}

// timing records the scheduler's durations, 0 and null meaning unknown.
func (r *SGLangReader) timing(m *jsonValue, tl *stages.Timeline, ev *Event) {
	const s = time.Second
	queue, okq := positive(m, "queue_time")
	fwd, okf := positive(m, "forward_entry_time")
	done, okd := positive(m, "prefill_finished_time")
	if ts := m.Get("time_stats"); ts != nil && ts.Type() == jsonObject {
		if !okf {
			fwd, okf = positive(ts, "forward_entry_time")
		}
		if !okd {
			done, okd = positive(ts, "prefill_finished_time")
		}
		if wait, okw := positive(ts, "wait_queue_entry_time"); !okq && okw && okf && fwd > wait {
			queue, okq = fwd-wait, true
		}
	}
	if okq {
		if d, ok := toDur(queue, s); ok {
			setEngine(tl, stages.EngineQueue, d)
			ev.Timing = true
		} else {
			okq = false
		}
	}
	if okf && okd {
		if d, ok := toDur(done-fwd, s); ok {
			setEngine(tl, stages.EnginePrefill, d)
			ev.Timing = true
			ev.Inferred = !okq
		}
	}
}

// positive reads v[key] as a number, reporting only values above 0.
func positive(v *jsonValue, key string) (float64, bool) {
	f, ok := numField(v, key)
	return f, ok && f > 0
}

// grew reports whether text is new output for choice idx, and remembers it.
func (r *SGLangReader) grew(idx int, text []byte) bool {
	if idx < 0 || idx >= sglangChoices {
		return len(text) > 0
	}
	p := &r.prev[idx]
	k := min(len(text), sglangPrefix)
	c := min(k, p.np) // compare as much of both starts as both have
	same := bytes.Equal(text[:c], p.prefix[:c])
	grew := len(text) > 0 && (len(text) > p.n || !same)
	p.n = len(text)
	p.np = copy(p.prefix[:], text[:k])
	return grew
}

// Reset forgets the previous texts.
func (r *SGLangReader) Reset() { r.prev = [sglangChoices]sglangText{} }
