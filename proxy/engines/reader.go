package engines

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// Reader reads one engine kind's signals. Not safe for concurrent use; one
// per request (pooled).
//
// The relay calls, for one request:
//
//	r.Reset()                      // when taking it from the pool
//	r.Header(resp.Peek, tl)        // once the upstream headers are read
//	r.Event(data, tl)              // per SSE data field / NDJSON line, or once with a whole body
//	r.Header(trailer.Peek, tl)     // after the body ended (trailers), if any
//	InferQueue(tl, slotWait)       // at done, after the last Event and Header
//
// Every reader reads the OpenAI-compatible fields (content, finish reason,
// [DONE], error, usage) with OpenAI.Inspect's semantics; each adds its
// engine's own. Event allocates nothing once warm.
type Reader interface {
	// Kind names the engine kind and the record's engine_report source:
	// "reference", "vllm", "llamacpp", "ollama", "sglang", "tgi",
	// "anthropic", "generic".
	Kind() string
	// Header reads signals in response headers (and trailers, called again
	// after the body ends); it records engine durations on tl and reports
	// whether it recorded any. h returns a header's value, nil when absent;
	// names are passed in canonical form ("Server-Timing", "X-Queue-Time").
	Header(h func(name string) []byte, tl *stages.Timeline) bool
	// Event reads one event's data (an SSE data field, one NDJSON line, or
	// a whole non-streamed body), parsing it once, and records engine
	// durations on tl when the event carries them. tl may be nil (nothing
	// is recorded, Event.Timing still says whether there was something).
	Event(data []byte, tl *stages.Timeline) Event
	// Reset readies the reader for another request.
	Reset()
}

// The engine kinds, as accepted by NewReader and returned by Detect.
const (
	KindReference = "reference"
	KindVLLM      = "vllm"
	KindLlamaCpp  = "llamacpp"
	KindOllama    = "ollama"
	KindSGLang    = "sglang"
	KindTGI       = "tgi"
	KindAnthropic = "anthropic"
	KindGeneric   = "generic"
)

// Kinds lists the engine kinds NewReader accepts.
var Kinds = []string{KindReference, KindVLLM, KindLlamaCpp, KindOllama, KindSGLang, KindTGI, KindAnthropic, KindGeneric}

// ErrUnknownKind is returned by NewReader for a kind it does not know.
var ErrUnknownKind = errors.New("engines: unknown engine kind")

// NewReader returns a reader for kind (one of Kinds). "auto" is not a kind:
// resolve it with Detect first.
func NewReader(kind string) (Reader, error) {
	switch kind {
	case KindReference:
		return new(ReferenceReader), nil
	case KindVLLM:
		return new(VLLMReader), nil
	case KindLlamaCpp:
		return new(LlamaCppReader), nil
	case KindOllama:
		return new(OllamaReader), nil
	case KindSGLang:
		return new(SGLangReader), nil
	case KindTGI:
		return new(TGIReader), nil
	case KindAnthropic:
		return new(AnthropicReader), nil
	case KindGeneric:
		return new(GenericReader), nil
	}
	return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownKind, kind, strings.Join(Kinds, ", "))
}

// InferQueue infers the engine queue where the engine reported none
// (llama.cpp always; Ollama; vLLM, SGLang when their queue field is
// missing; any engine that reports nothing), and records it with
// Timeline.InferEngine so the record keeps it apart from what was reported.
// The proxy calls it once at done for every request, after the last Event
// and Header: a reader records durations as the events arrive, so calling
// it earlier would infer from an incomplete report. It reports whether it
// inferred the queue. Two inferences, the first that applies:
//
//   - slotWait > 0: the proxy's own account of the request's wait for one
//     of the engine's slots, from the requests it had in flight to that
//     upstream (the wait until enough of those sent before it ended). It
//     is what the engine would have reported as its queue, with no
//     network, handling or tokenization in it: what the report leaves of
//     the window stays unattributed.
//   - the engine reported a prefill: the queue is what the engine's report
//     leaves of the upstream window before the first token, (FirstTokenArrived
//     − UpstreamSent) minus the reported parts. It is an upper bound of the
//     real queue: it also holds the network both ways and whatever the
//     engine did not report (its HTTP handling, templating, tokenization).
//
// Either is cut to what the reported parts leave of the window, so an
// inferred queue never makes the report inconsistent; nothing is recorded
// when nothing is left, or without the marks.
func InferQueue(tl *stages.Timeline, slotWait time.Duration) bool { return inferQueue(tl, slotWait, 0) }

// inferQueue is InferQueue where the engine also spent decode generating
// before the first token reached the proxy: a whole body's decode.
func inferQueue(tl *stages.Timeline, slotWait, decode time.Duration) bool {
	if tl == nil {
		return false
	}
	if _, ok := tl.Engine(stages.EngineQueue); ok {
		return false
	}
	sent, ok1 := tl.At(stages.UpstreamSent)
	first, ok2 := tl.At(stages.FirstTokenArrived)
	if !ok2 {
		first, ok2 = tl.At(stages.FirstToken)
	}
	if !ok1 || !ok2 {
		return false
	}
	left := first - sent - decode
	for d := range stages.NumEngineDurs {
		if v, ok := tl.Engine(d); ok && d != stages.EngineSync && v > 0 {
			left -= v
		}
	}
	q := left
	if slotWait > 0 {
		q = min(slotWait, left)
	} else if _, ok := tl.Engine(stages.EnginePrefill); !ok {
		return false
	}
	if q <= 0 {
		return false
	}
	tl.InferEngine(stages.EngineQueue, q)
	return true
}

// EventType is the kind of an Anthropic Messages stream event.
type EventType uint8

// The Anthropic event types (the "type" field of each event's data).
const (
	EventNone              EventType = iota // not an Anthropic event
	EventMessageStart                       // message_start
	EventContentBlockStart                  // content_block_start
	EventContentBlockDelta                  // content_block_delta
	EventContentBlockStop                   // content_block_stop
	EventMessageDelta                       // message_delta
	EventMessageStop                        // message_stop
	EventPing                               // ping
	EventError                              // error
	EventMessage                            // a whole non-streamed Message ("type":"message")
	EventOther                              // a type this reader does not know (to be ignored)
)

var eventTypeNames = [...]string{"", "message_start", "content_block_start", "content_block_delta",
	"content_block_stop", "message_delta", "message_stop", "ping", "error", "message", "other"}

func (t EventType) String() string {
	if int(t) < len(eventTypeNames) {
		return eventTypeNames[t]
	}
	return "event?"
}

// maxDur bounds engine-reported durations: values past a day either way are
// not measurements (the same bound as Server-Timing's).
const maxDur = 24 * time.Hour

// toDur converts f units of unit to a Duration, rounded to the nanosecond;
// ok is false for NaN, infinities and values past a day either way.
func toDur(f float64, unit time.Duration) (time.Duration, bool) {
	d := f * float64(unit)
	if d != d || d > float64(maxDur) || d < -float64(maxDur) {
		return 0, false
	}
	return time.Duration(math.Round(d)), true
}

// numField returns v[key] as a number; ok is false when it is missing, null
// or not a number.
func numField(v *jsonValue, key string) (float64, bool) {
	x := v.Get(key)
	if x == nil || x.Type() != jsonNumber {
		return 0, false
	}
	f, err := parseNumber(x.s)
	if err != nil {
		return 0, false
	}
	return f, true
}

// parseNumber reads a JSON number as fastfloat does, its mantissa cut to
// the first 16 characters from its first digit ('.' included) when it is
// longer: fastfloat would hand it to strconv, whose slow path takes a
// ~950-byte frame that an open stream's 4 KiB stack cannot hold
// (ARCHITECTURE.md). What the cut drops is below a float64's precision for
// any duration of a day or less (maxDur): tenths of a nanosecond or
// finer. A mantissa whose integer part alone is that long is read whole,
// as is one with an exponent and a leading zero.
func parseNumber(s []byte) (float64, error) {
	mant, exp := s, []byte(nil)
	if i := bytes.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
	}
	short := shortMantissa(mant)
	if len(short) == len(mant) || exp != nil && bytes.TrimLeft(mant, "+-")[0] == '0' {
		// Whole: short, or zeros first, which the cut would keep instead
		// of the digits that an exponent may raise into a duration.
		return parseFloat(s)
	}
	f, err := parseFloat(short)
	if err != nil || exp == nil {
		return f, err
	}
	e, err := parseInt(bytes.TrimPrefix(exp, []byte("+")))
	if err != nil {
		return 0, err
	}
	return f * math.Pow10(int(max(min(e, 400), -400))), nil
}

// shortMantissa is m cut after 16 characters from its first digit, when
// the cut leaves its integer part whole.
func shortMantissa(m []byte) []byte {
	const keep = 16 // what fastfloat parses itself
	j := 0
	if len(m) > 0 && (m[0] == '-' || m[0] == '+') {
		j = 1
	}
	if len(m)-j <= keep {
		return m
	}
	if dot := bytes.IndexByte(m, '.'); dot < 0 || dot >= j+keep-1 {
		return m
	}
	return m[:j+keep]
}

// durField reads v[key] as a duration in unit.
func durField(v *jsonValue, key string, unit time.Duration) (time.Duration, bool) {
	f, ok := numField(v, key)
	if !ok {
		return 0, false
	}
	return toDur(f, unit)
}

// durationFields name the fields in which an engine reports its queue, its
// prefill and its decode, all in unit; an engine with no queue field leaves
// queue empty.
type durationFields struct {
	queue, prefill, decode string
	unit                   time.Duration
}

// read records the queue and the prefill in v on tl, and sets ev's Timing,
// Inferred (a prefill without a queue: InferQueue infers it at done) and
// Decode.
func (f durationFields) read(v *jsonValue, tl *stages.Timeline, ev *Event) {
	queue, okq := time.Duration(0), false
	if f.queue != "" {
		queue, okq = durField(v, f.queue, f.unit)
	}
	if okq {
		setEngine(tl, stages.EngineQueue, queue)
		ev.Timing = true
	}
	if d, ok := durField(v, f.prefill, f.unit); ok {
		setEngine(tl, stages.EnginePrefill, d)
		ev.Timing = true
		ev.Inferred = !okq
	}
	if d, ok := durField(v, f.decode, f.unit); ok && d > 0 {
		ev.Decode = d
	}
}

// intField reads v[key] as a non-negative count; ok is false when it is
// missing or not an integer (GetInt would say 0 for both).
func intField(v *jsonValue, key string) (int, bool) {
	x := v.Get(key)
	if x == nil || x.Type() != jsonNumber {
		return 0, false
	}
	n, err := x.Int()
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// setEngine records d on tl (when tl is not nil).
func setEngine(tl *stages.Timeline, which stages.EngineDur, d time.Duration) {
	if tl != nil {
		tl.SetEngine(which, d)
	}
}

// noHeader is Header for the kinds whose engines send no timing headers.
func noHeader(func(string) []byte, *stages.Timeline) bool { return false }
