package exporters

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// form is a set of the JSON forms of a record.
type form uint8

const (
	inLog  form = 1 << iota // the log line
	inPage                  // GET /debug/requests/{id}
	inRow                   // a row of GET /debug/requests

	framing  = inLog                  // the log's own: level, msg
	detailed = inLog | inPage         // the record in full
	listed   = inLog | inPage | inRow // enough for a table row
)

// fieldSpec says which forms carry a field, when it applies, and how it is
// written.
type fieldSpec struct {
	in form
	// applies reports whether the field is written for s; nil: always.
	applies func(s *Summary) bool
	write   writeFunc
}

// writeFunc adds the field called name, read from s, to e. b is scratch
// space for values built as raw JSON; it returns b, possibly grown.
type writeFunc func(e *zerolog.Event, name string, s *Summary, b []byte) []byte

// fieldSpecs covers every record.Field; record.Fields gives their order.
var fieldSpecs = map[record.Field]fieldSpec{
	record.FieldTime:         {listed, nil, raw(appendTime)},
	record.FieldLevel:        {framing, nil, str(func(s *Summary) string { return level(s.Reason) })},
	record.FieldMsg:          {framing, nil, str(func(*Summary) string { return "request" })},
	record.FieldRequestID:    {listed, nil, str(func(s *Summary) string { return s.RequestID })},
	record.FieldTraceID:      {detailed, nil, hexID(func(s *Summary) []byte { return s.TraceID[:] })},
	record.FieldSpanID:       {detailed, nil, hexID(func(s *Summary) []byte { return s.SpanID[:] })},
	record.FieldParentSpanID: {detailed, hasParent, hexID(func(s *Summary) []byte { return s.ParentID[:] })},
	record.FieldMethod:       {listed, nil, str(func(s *Summary) string { return s.Method })},
	record.FieldPath:         {listed, nil, str(func(s *Summary) string { return s.Path })},
	record.FieldModel:        {listed, nil, str(func(s *Summary) string { return s.Model })},
	record.FieldStream:       {listed, nil, boolean(func(s *Summary) bool { return s.Streaming })},
	record.FieldStatus:       {listed, nil, integer(func(s *Summary) int64 { return int64(s.Status) })},
	record.FieldUpstream:     {listed, nil, str(func(s *Summary) string { return s.Upstream })},
	record.FieldKey:          {detailed, func(s *Summary) bool { return s.Key != "" }, str(func(s *Summary) string { return s.Key })},
	record.FieldEndReason:    {listed, nil, str(func(s *Summary) string { return s.Reason.String() })},
	record.FieldEndDetail:    {listed, nil, str(func(s *Summary) string { return string(s.Detail) })},
	record.FieldPhase:        {listed, isClientCancel, str(func(s *Summary) string { return s.Phase.String() })},
	record.FieldError:        {detailed, func(s *Summary) bool { return s.Error != "" }, str(func(s *Summary) string { return s.Error })},

	record.FieldTTFT:                     {listed, hasFirstToken, duration(func(s *Summary) time.Duration { return s.Breakdown.TTFT })},
	record.FieldE2E:                      {listed, nil, duration(func(s *Summary) time.Duration { return s.E2E })},
	record.FieldStages:                   {listed, hasFirstToken, raw(appendStages)},
	record.FieldUpstreamUnsplit:          {detailed, func(s *Summary) bool { return s.Breakdown.OK && s.Breakdown.Unsplit }, writeTrue},
	record.FieldEngineReportInconsistent: {detailed, func(s *Summary) bool { return s.Breakdown.OK && s.Breakdown.Inconsistent }, writeTrue},
	record.FieldEngine:                   {detailed, func(s *Summary) bool { return s.Timeline.EngineReported() }, raw(appendEngine)},
	record.FieldEngineReport:             {detailed, hasEngineSource, str(func(s *Summary) string { return s.EngineSource })},
	record.FieldEngineReportInferred:     {detailed, func(s *Summary) bool { return hasEngineSource(s) && s.EngineInferred }, writeTrue},
	record.FieldEngineWaiting:            {detailed, hasEngineLoad, integer(func(s *Summary) int64 { return s.EngineWaiting })},
	record.FieldEngineRunning:            {detailed, hasEngineLoad, integer(func(s *Summary) int64 { return s.EngineRunning })},

	record.FieldTokensOut:         {listed, nil, integer(func(s *Summary) int64 { return int64(s.TokensOut) })},
	record.FieldTokensIn:          {detailed, func(s *Summary) bool { return s.TokensIn != 0 }, integer(func(s *Summary) int64 { return int64(s.TokensIn) })},
	record.FieldITL:               {detailed, func(s *Summary) bool { return s.Gaps.N > 0 }, raw(appendITL)},
	record.FieldStalls:            {detailed, func(s *Summary) bool { return s.Stalls != 0 }, integer(func(s *Summary) int64 { return int64(s.Stalls) })},
	record.FieldEvents:            {detailed, nil, integer(func(s *Summary) int64 { return int64(s.Events) })},
	record.FieldResidencyMax:      {detailed, func(s *Summary) bool { return s.MaxResidency > 0 }, duration(func(s *Summary) time.Duration { return s.MaxResidency })},
	record.FieldTransportBlocked:  {detailed, func(s *Summary) bool { return stages.Micros(s.Blocked) > 0 }, duration(func(s *Summary) time.Duration { return s.Blocked })},
	record.FieldBuffering:         {detailed, func(s *Summary) bool { return s.Buffering != 0 }, raw(appendBuffering)},
	record.FieldBytesIn:           {detailed, nil, integer(func(s *Summary) int64 { return s.BytesIn })},
	record.FieldBytesOut:          {detailed, nil, integer(func(s *Summary) int64 { return s.BytesOut })},
	record.FieldCancelToClose:     {detailed, isClientCancel, duration(func(s *Summary) time.Duration { return s.CancelToClose })},
	record.FieldTokensAfterCancel: {detailed, isClientCancel, integer(func(s *Summary) int64 { return int64(s.TokensAfterCancel) })},
}

func hasParent(s *Summary) bool       { return !s.ParentID.IsZero() }
func isClientCancel(s *Summary) bool  { return s.Reason == endreason.ClientCancel }
func hasFirstToken(s *Summary) bool   { return s.Breakdown.OK }
func hasEngineSource(s *Summary) bool { return s.EngineSource != "" }
func hasEngineLoad(s *Summary) bool   { return s.EngineLoad }

// namedField is a fieldSpec with its name.
type namedField struct {
	name string
	fieldSpec
}

// recordFields is fieldSpecs in the order of record.Fields.
var recordFields = orderFields()

func orderFields() []namedField {
	if len(fieldSpecs) != len(record.Fields) {
		panic("exporters: fieldSpecs and record.Fields differ")
	}
	out := make([]namedField, len(record.Fields))
	for i, f := range record.Fields {
		spec, ok := fieldSpecs[f]
		if !ok {
			panic("exporters: no fieldSpec for record field " + string(f))
		}
		out[i] = namedField{string(f), spec}
	}
	return out
}

// writeFields adds to e, in order, the fields of s that the forms in carry
// and that apply to s. b is scratch space; it returns b, possibly grown.
// It allocates nothing.
func writeFields(e *zerolog.Event, s *Summary, in form, b []byte) []byte {
	for i := range recordFields {
		f := &recordFields[i]
		if f.in&in != 0 && (f.applies == nil || f.applies(s)) {
			b = f.write(e, f.name, s, b[:0])
		}
	}
	return b
}

// The writers of each kind of value.

func str(get func(*Summary) string) writeFunc {
	return func(e *zerolog.Event, name string, s *Summary, b []byte) []byte {
		e.Str(name, get(s))
		return b
	}
}

func integer(get func(*Summary) int64) writeFunc {
	return func(e *zerolog.Event, name string, s *Summary, b []byte) []byte {
		e.Int64(name, get(s))
		return b
	}
}

func boolean(get func(*Summary) bool) writeFunc {
	return func(e *zerolog.Event, name string, s *Summary, b []byte) []byte {
		e.Bool(name, get(s))
		return b
	}
}

// writeTrue writes true: the field's presence is what it says.
func writeTrue(e *zerolog.Event, name string, _ *Summary, b []byte) []byte {
	e.Bool(name, true)
	return b
}

// hexID writes a trace or span id in lowercase hex.
func hexID(get func(*Summary) []byte) writeFunc {
	return func(e *zerolog.Event, name string, s *Summary, b []byte) []byte {
		e.Hex(name, get(s))
		return b
	}
}

// duration writes milliseconds, rounded to the microsecond.
func duration(get func(*Summary) time.Duration) writeFunc {
	return raw(func(b []byte, s *Summary) []byte { return stages.AppendMillis(b, stages.Micros(get(s))) })
}

// raw writes the JSON value appendValue appends.
func raw(appendValue func(b []byte, s *Summary) []byte) writeFunc {
	return func(e *zerolog.Event, name string, s *Summary, b []byte) []byte {
		b = appendValue(b, s)
		e.RawJSON(name, b)
		return b
	}
}

func appendTime(b []byte, s *Summary) []byte {
	b = append(b, '"')
	b = s.Timeline.Wall().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendStages appends the TTFT stages in stage order, rounded so that
// they add up to ttft_ms exactly (stages.Breakdown.Micros).
func appendStages(b []byte, s *Summary) []byte {
	var us [stages.NumStages]int64
	s.Breakdown.Micros(&us)
	b = append(b, '{')
	for i, v := range us {
		b = appendMillisMember(b, stages.Stage(i).String(), v)
	}
	return append(b, '}')
}

// appendEngine appends the engine's reported durations, raw.
func appendEngine(b []byte, s *Summary) []byte {
	return appendMillisObject(b, stages.NumEngineDurs, s.Timeline.Engine)
}

// appendMillisObject appends a JSON object of the durations at reports
// set, of the keys below n in order, by the keys' names.
func appendMillisObject[K interface {
	~uint8
	String() string
}](b []byte, n K, at func(K) (time.Duration, bool)) []byte {
	b = append(b, '{')
	for k := range n {
		if v, ok := at(k); ok {
			b = appendMillisMember(b, k.String(), stages.Micros(v))
		}
	}
	return append(b, '}')
}

func appendITL(b []byte, s *Summary) []byte {
	b = append(b, '{')
	b = appendMillisMember(b, "p50", stages.Micros(s.Gaps.P50))
	b = appendMillisMember(b, "p99", stages.Micros(s.Gaps.P99))
	b = appendMillisMember(b, "max", stages.Micros(s.Gaps.Max))
	return append(b, '}')
}

func appendBuffering(b []byte, s *Summary) []byte {
	b = append(b, '[')
	for i, k := range record.BufferingKinds() {
		if s.Buffering&(1<<i) == 0 {
			continue
		}
		if b[len(b)-1] != '[' {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"')
	}
	return append(b, ']')
}

// appendMillisMember appends "key":ms to the JSON object b ends in, after a
// comma unless it is the first member. key must need no escaping.
func appendMillisMember(b []byte, key string, us int64) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return stages.AppendMillis(b, us)
}
