package engines

import (
	"bytes"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// PhasePrefix starts the reference engine's progress comment
// (refengine/PROTOCOL.md, "Progress"): ": ttftlens-phase queued|prefill".
var PhasePrefix = []byte("ttftlens-phase ")

// FaultHeader is the reference engine's per-request fault list
// (refengine.FaultHeader; refengine/FAULTS.md).
const FaultHeader = "X-Ttftlens-Fault"

// operatorHeaders: see OperatorHeaders.
var operatorHeaders = []string{FaultHeader}

// OperatorHeaders returns the client request headers that only the
// operator may pass to an engine: they change how the engine serves every
// request, not just the sender's (the reference engine's faults). The
// caller must not modify the slice.
func OperatorHeaders() []string { return operatorHeaders }

// WithholdsHeaders reports whether a fault list asks the reference engine
// for hold_headers: no headers (and no progress) until the first token, so
// their absence says nothing about where the request is.
func WithholdsHeaders(faults []byte) bool {
	for len(faults) > 0 {
		var f []byte
		if i := bytes.IndexByte(faults, ','); i >= 0 {
			f, faults = faults[:i], faults[i+1:]
		} else {
			f, faults = faults, nil
		}
		if string(bytes.TrimSpace(f)) == "hold_headers" {
			return true
		}
	}
	return false
}

// ParsePhase reads a progress comment's value: PhaseQueued, PhasePrefill,
// or PhaseNone for anything else.
func ParsePhase(v []byte) endreason.Phase {
	switch string(v) {
	case "queued":
		return endreason.PhaseQueued
	case "prefill":
		return endreason.PhasePrefill
	}
	return endreason.PhaseNone
}

// ReferenceReader reads the ttftlens reference engine (refengine/PROTOCOL.md):
// OpenAI-compatible events, and its durations in a W3C Server-Timing
// response header or HTTP trailer (queue, tokenize, media, prefill, sync,
// decode1, recv, emit; milliseconds). The in-band SSE comment ": server-timing …" is
// not data: the relay reads it with ParseServerTiming.
type ReferenceReader struct{}

// Kind returns "reference".
func (*ReferenceReader) Kind() string { return KindReference }

// Header reads the Server-Timing header (or trailer).
func (*ReferenceReader) Header(h func(string) []byte, tl *stages.Timeline) bool {
	if tl == nil {
		return false
	}
	return ParseServerTiming(h("Server-Timing"), tl) > 0
}

// Event reads an OpenAI-compatible chunk or body.
func (*ReferenceReader) Event(data []byte, _ *stages.Timeline) Event {
	return readEvent(data, readOpenAIExt)
}

// Reset does nothing: the reader keeps no per-request state.
func (*ReferenceReader) Reset() {}
