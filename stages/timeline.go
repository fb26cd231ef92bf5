// Package stages keeps one request's clock: monotonic marks observed by the
// proxy, durations reported by the engine, and the stages of time to first
// token derived from both (ARCHITECTURE.md has the formulas). It imports only the standard library.
package stages

import "time"

// Mark is a moment of a request observed by the proxy.
type Mark uint8

// The marks, in the order a successful request passes them.
const (
	Received          Mark = iota // handler entry (t = 0)
	GatewayDone                   // auth, quota and parameter validation passed
	Routed                        // upstream chosen
	Admitted                      // left our own admission queue
	UpstreamConnected             // a connection to the upstream is ready: a pooled one taken, or a new one dialed (with its TLS handshake)
	UpstreamSent                  // request written to the upstream connection
	UpstreamHeaders               // upstream status line and headers read
	FirstEvent                    // first SSE event parsed
	FirstTokenArrived             // the kernel received the upstream read that brought the first content event (its receive timestamp; else when that read returned)
	FirstToken                    // first event carrying generated content parsed
	FirstTokenFlushed             // that event handed to the client socket
	FirstAnswer                   // the first event carrying answer (not reasoning only) handed to the client socket
	LastToken                     // last content event parsed
	Done                          // the response is over
	NumMarks
)

var markNames = [NumMarks]string{
	"received", "gateway_done", "routed", "admitted", "upstream_connected", "upstream_sent", "upstream_headers",
	"first_event", "first_token_arrived", "first_token", "first_token_flushed", "first_answer", "last_token", "done",
}

func (m Mark) String() string {
	if m < NumMarks {
		return markNames[m]
	}
	return "mark?"
}

// EngineDur is a duration the engine reports about the request.
type EngineDur uint8

// The engine durations, as engines report them (proxy/engines reads
// them). Sync is part of Prefill, not added to it. Recv and Emit are the
// engine's own handling around its stages: reading, decoding and
// validating the request, and handing its first token to the response.
// Unread is the time the request's bytes waited in the engine's socket
// before it read them (a busy server): a queue. Load is a model load the
// request waited for (the engine had to load the model before it could
// serve it): a queue too, kept apart so a cold start is named as one.
const (
	EngineQueue EngineDur = iota
	EngineTokenize
	EngineMedia
	EnginePrefill
	EngineSync
	EngineFirstDecode
	EngineRecv
	EngineEmit
	EngineUnread
	EngineLoad
	NumEngineDurs
)

var engineNames = [NumEngineDurs]string{"queue", "tokenize", "media", "prefill", "sync", "first_decode", "recv", "emit", "unread", "load"}

func (d EngineDur) String() string {
	if d < NumEngineDurs {
		return engineNames[d]
	}
	return "engine?"
}

// engineStages is the stage each engine duration counts in; Sync counts in
// none of its own (it is inside Prefill).
var engineStages = [NumEngineDurs]Stage{
	EngineQueue: Queue, EngineTokenize: Preparation, EngineMedia: Preparation, EnginePrefill: Prefill,
	EngineSync: NumStages, EngineFirstDecode: FirstDecode, EngineRecv: Preparation, EngineEmit: FirstDecode,
	EngineUnread: Queue, EngineLoad: Queue,
}

// Stage is the stage d counts in (ARCHITECTURE.md's stage formulas);
// NumStages for Sync, which is inside Prefill.
func (d EngineDur) Stage() Stage {
	if d < NumEngineDurs {
		return engineStages[d]
	}
	return NumStages
}

// EngineSet is a set of engine durations.
type EngineSet uint16

// The set must hold every engine duration.
const _ = EngineSet(1 << (NumEngineDurs - 1))

// Has reports whether d is in s.
func (s EngineSet) Has(d EngineDur) bool { return s&(1<<d) != 0 }

// With returns s with d added.
func (s EngineSet) With(d EngineDur) EngineSet { return s | 1<<d }

// AppendJSON appends s as a JSON array of the durations' names, in
// EngineDur order: ["queue"].
func (s EngineSet) AppendJSON(b []byte) []byte {
	b = append(b, '[')
	first := true
	for d := range NumEngineDurs {
		if !s.Has(d) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(append(append(b, '"'), engineNames[d]...), '"')
	}
	return append(b, ']')
}

// Clock returns a monotonic reading in nanoseconds. Only differences matter.
type Clock func() int64

var processStart = time.Now()

// Monotonic is the real clock: nanoseconds on the process's monotonic clock.
func Monotonic() int64 { return int64(time.Since(processStart)) }

// Timeline is one request's clock. The zero value is unusable until Start.
// It allocates nothing; a Timeline may be reused after Start is called again.
// Not safe for concurrent use: the request's serving goroutine owns it.
type Timeline struct {
	clock     Clock
	start     int64
	wall      time.Time
	marks     [NumMarks]time.Duration
	set       uint16
	engine    [NumEngineDurs]time.Duration
	engineSet EngineSet
	inferred  EngineSet // the engine durations the proxy inferred
}

// The bit set must hold every mark.
const _ = uint16(1 << (NumMarks - 1))

// Start resets t and marks Received now. wall is the wall-clock time of
// receipt, kept only for export (logs, spans); all arithmetic uses clock.
func (t *Timeline) Start(clock Clock, wall time.Time) {
	*t = Timeline{clock: clock, start: clock(), wall: wall, set: 1 << Received}
}

// Wall returns the wall-clock time at Received.
func (t *Timeline) Wall() time.Time { return t.wall }

// Now returns the current offset from Received.
func (t *Timeline) Now() time.Duration { return time.Duration(t.clock() - t.start) }

// Mark records m now unless it is already set (the first observation wins).
func (t *Timeline) Mark(m Mark) {
	if t.set&(1<<m) == 0 {
		t.marks[m] = t.Now()
		t.set |= 1 << m
	}
}

// MarkAt records m at offset d, replacing any earlier value.
func (t *Timeline) MarkAt(m Mark, d time.Duration) {
	t.marks[m] = d
	t.set |= 1 << m
}

// Has reports whether m was recorded.
func (t *Timeline) Has(m Mark) bool { return t.set&(1<<m) != 0 }

// At returns the offset of m from Received, and whether m was recorded.
func (t *Timeline) At(m Mark) (time.Duration, bool) { return t.marks[m], t.Has(m) }

// SetEngine records an engine-reported duration. Negative values are kept
// raw; the derivation clamps them.
func (t *Timeline) SetEngine(d EngineDur, v time.Duration) {
	t.engine[d] = v
	t.engineSet = t.engineSet.With(d)
	t.inferred &^= 1 << d
}

// InferEngine records an engine duration the engine did not report, which
// the proxy inferred; Inferred says which those are.
func (t *Timeline) InferEngine(d EngineDur, v time.Duration) {
	t.SetEngine(d, v)
	t.inferred = t.inferred.With(d)
}

// DropInferred forgets the engine durations the proxy inferred, so that a
// report that comes later (the engine's span) replaces them.
func (t *Timeline) DropInferred() {
	t.engineSet &^= t.inferred
	t.inferred = 0
}

// Engine returns an engine duration and whether it was recorded, reported
// or inferred.
func (t *Timeline) Engine(d EngineDur) (time.Duration, bool) {
	return t.engine[d], t.engineSet.Has(d)
}

// Inferred is the set of engine durations the proxy inferred (InferEngine)
// rather than read from the engine's report.
func (t *Timeline) Inferred() EngineSet { return t.inferred }

// Origin is the clock's reading at Received: marks of different requests
// on one clock compare as Origin plus their offsets.
func (t *Timeline) Origin() int64 { return t.start }

// EngineReported reports whether the engine reported any duration.
func (t *Timeline) EngineReported() bool { return t.engineSet&^t.inferred != 0 }

// at returns the offset of m, or of the latest recorded mark before it when m
// is missing, so a stage between two marks is zero rather than undefined.
func (t *Timeline) at(m Mark) time.Duration {
	for ; m > Received; m-- {
		if t.Has(m) {
			return t.marks[m]
		}
	}
	return 0
}
