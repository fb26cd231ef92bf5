package exporters

import (
	"strconv"
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

// fieldForms says which forms carry each field.
var fieldForms = [record.NumFields]form{
	record.FieldTime:          listed,
	record.FieldLevel:         framing,
	record.FieldMsg:           framing,
	record.FieldRequestID:     listed,
	record.FieldTraceID:       detailed,
	record.FieldSpanID:        detailed,
	record.FieldParentSpanID:  detailed,
	record.FieldMethod:        listed,
	record.FieldPath:          listed,
	record.FieldModel:         listed,
	record.FieldStream:        listed,
	record.FieldStatus:        listed,
	record.FieldUpstream:      listed,
	record.FieldPolicy:        detailed,
	record.FieldUpstreamConn:  detailed,
	record.FieldEngineKind:    detailed,
	record.FieldKey:           detailed,
	record.FieldQuota:         detailed,
	record.FieldQuotaFallback: detailed,
	record.FieldEndReason:     listed,
	record.FieldEndDetail:     listed,
	record.FieldPhase:         listed,
	record.FieldError:         detailed,

	record.FieldTTFT:                     listed,
	record.FieldFirstAnswer:              detailed,
	record.FieldE2E:                      listed,
	record.FieldStages:                   listed,
	record.FieldUpstreamUnsplit:          detailed,
	record.FieldEngineReportInconsistent: detailed,
	record.FieldEngine:                   detailed,
	record.FieldEngineReport:             detailed,
	record.FieldEngineReportInferred:     detailed,
	record.FieldEngineSpanMissing:        detailed,
	record.FieldEngineWaiting:            detailed,
	record.FieldEngineRunning:            detailed,
	record.FieldTTFTSLO:                  detailed,
	record.FieldSLOFallback:              detailed,
	record.FieldPredictedTTFT:            detailed,
	record.FieldPredictedStages:          detailed,
	record.FieldPredictionOff:            detailed,
	record.FieldPrefixAffinity:           detailed,
	record.FieldCachedExpected:           detailed,
	record.FieldProbe:                    detailed,
	record.FieldPredictionInputs:         detailed,

	record.FieldTokensOut:         listed,
	record.FieldTokensIn:          detailed,
	record.FieldCachedTokens:      detailed,
	record.FieldReasoningTokens:   detailed,
	record.FieldITL:               detailed,
	record.FieldStalls:            detailed,
	record.FieldEvents:            detailed,
	record.FieldResidencyMax:      detailed,
	record.FieldTransportBlocked:  detailed,
	record.FieldBuffering:         detailed,
	record.FieldBytesIn:           detailed,
	record.FieldBytesOut:          detailed,
	record.FieldCancelToClose:     detailed,
	record.FieldTokensAfterCancel: detailed,
}

// fieldsIn holds, for each set of forms, the fields they carry: bit f for
// record.Field f. Per field, testing a bit of it costs writeFields less than
// a look-up in fieldForms.
var fieldsIn = func() (sets [inLog | inPage | inRow + 1]uint64) {
	if record.NumFields > 64 {
		panic("exporters: more record fields than bits in fieldsIn")
	}
	for in := range sets {
		for f, forms := range fieldForms {
			if forms&form(in) != 0 {
				sets[in] |= 1 << f
			}
		}
	}
	return sets
}()

// fieldSource is what the fields are read from: a record, and what is
// derived from it once.
type fieldSource struct {
	r         *record.Record
	breakdown stages.Breakdown // r.Breakdown()
	gaps      stages.Gaps      // r.Stream.Gaps()
}

// writeFields adds to e the fields of src that the forms in carry and that
// apply to the request, in record.Field order. Its cases say when each
// field applies and how it is written, for the log line and the pages
// alike. Values built as raw JSON go through sc.b. It allocates nothing but
// to grow sc.b.
//
// It is the log line's hot path: code size counts as much as instructions
// here (reading the name in each case instead of once runs fewer
// instructions, but the larger code measured slower).
func writeFields(e *zerolog.Event, src *fieldSource, in form, sc *scratch) {
	r, bd := src.r, &src.breakdown
	set := fieldsIn[in]
	for f := range record.NumFields {
		if set&(1<<f) == 0 {
			continue
		}
		name := f.String()
		switch f {
		case record.FieldTime:
			sc.b = appendTime(sc.b[:0], r.Timeline.Wall())
			e.RawJSON(name, sc.b)
		case record.FieldLevel:
			e.Str(name, level(r.Reason))
		case record.FieldMsg:
			e.Str(name, "request")
		case record.FieldRequestID:
			e.Str(name, r.RequestID)
		case record.FieldTraceID:
			e.Hex(name, r.TraceID[:])
		case record.FieldSpanID:
			e.Hex(name, r.SpanID[:])
		case record.FieldParentSpanID:
			if !r.ParentID.IsZero() {
				e.Hex(name, r.ParentID[:])
			}
		case record.FieldMethod:
			e.Str(name, r.Method)
		case record.FieldPath:
			e.Str(name, r.Path)
		case record.FieldModel:
			e.Str(name, r.Model)
		case record.FieldStream:
			e.Bool(name, r.Streaming)
		case record.FieldStatus:
			e.Int(name, r.Status)
		case record.FieldUpstream:
			e.Str(name, r.Upstream)
		case record.FieldPolicy:
			if r.Policy != "" {
				e.Str(name, r.Policy)
			}
		case record.FieldUpstreamConn:
			if r.UpstreamConn != record.ConnNone {
				e.Str(name, r.UpstreamConn.String())
			}
		case record.FieldEngineKind:
			if r.Engine != "" {
				e.Str(name, r.Engine)
			}
		case record.FieldKey:
			if r.Key != "" {
				e.Str(name, r.Key)
			}
		case record.FieldQuota:
			if r.QuotaChecked {
				sc.b = appendDuration(sc.b[:0], r.QuotaTime)
				e.RawJSON(name, sc.b)
			}
		case record.FieldQuotaFallback:
			if r.QuotaFallback {
				e.Bool(name, true)
			}
		case record.FieldEndReason:
			e.Str(name, r.Reason.String())
		case record.FieldEndDetail:
			e.Str(name, string(r.Detail))
		case record.FieldPhase:
			if r.Reason == endreason.ClientCancel {
				e.Str(name, r.Phase.String())
			}
		case record.FieldError:
			if r.Error != "" {
				e.Str(name, r.Error)
			}

		case record.FieldTTFT:
			if bd.OK {
				sc.b = appendDuration(sc.b[:0], bd.TTFT)
				e.RawJSON(name, sc.b)
			}
		case record.FieldFirstAnswer:
			if d, ok := record.FirstAnswer(&r.Timeline); ok {
				sc.b = appendDuration(sc.b[:0], d)
				e.RawJSON(name, sc.b)
			}
		case record.FieldE2E:
			sc.b = appendDuration(sc.b[:0], r.E2E())
			e.RawJSON(name, sc.b)
		case record.FieldStages:
			if bd.OK {
				sc.b = appendStages(sc.b[:0], bd)
				e.RawJSON(name, sc.b)
			}
		case record.FieldUpstreamUnsplit:
			if bd.OK && bd.Unsplit {
				e.Bool(name, true)
			}
		case record.FieldEngineReportInconsistent:
			if bd.OK && bd.Inconsistent {
				e.Bool(name, true)
			}
		case record.FieldEngine:
			if r.Timeline.EngineReported() || r.Timeline.Inferred() != 0 {
				sc.b = appendEngine(sc.b[:0], &r.Timeline)
				e.RawJSON(name, sc.b)
			}
		case record.FieldEngineReport:
			if r.EngineSource != "" {
				e.Str(name, r.EngineSource)
			}
		case record.FieldEngineReportInferred:
			if inf := r.Timeline.Inferred(); inf != 0 {
				sc.b = inf.AppendJSON(sc.b[:0])
				e.RawJSON(name, sc.b)
			}
		case record.FieldEngineSpanMissing:
			if r.EngineSpanMissing != "" {
				e.Str(name, r.EngineSpanMissing)
			}
		case record.FieldEngineWaiting:
			if r.EngineLoad {
				e.Int64(name, r.EngineWaiting)
			}
		case record.FieldEngineRunning:
			if r.EngineLoad {
				e.Int64(name, r.EngineRunning)
			}

		case record.FieldTTFTSLO:
			if r.TTFTSLO > 0 {
				sc.b = appendDuration(sc.b[:0], r.TTFTSLO)
				e.RawJSON(name, sc.b)
			}
		case record.FieldSLOFallback:
			if r.SLOFallback {
				e.Bool(name, true)
			}
		case record.FieldPredictedTTFT:
			if r.Predicted {
				sc.b = appendDuration(sc.b[:0], r.PredictedTTFT())
				e.RawJSON(name, sc.b)
			}
		case record.FieldPredictedStages:
			if r.Predicted {
				sc.b = appendPredicted(sc.b[:0], &r.Prediction)
				e.RawJSON(name, sc.b)
			}
		case record.FieldPredictionOff:
			if r.Predicted && bd.OK {
				sc.b = appendOff(sc.b[:0], r.PredictionOff, r.PredictionOffBy)
				e.RawJSON(name, sc.b)
			}
		case record.FieldPrefixAffinity:
			if r.PrefixAffinity {
				e.Bool(name, true)
			}
		case record.FieldCachedExpected:
			if r.CachedExpected != 0 {
				e.Int(name, r.CachedExpected)
			}
		case record.FieldProbe:
			if r.Probe {
				e.Bool(name, true)
			}
		case record.FieldPredictionInputs:
			if r.Inputs.Set {
				sc.b = appendInputs(sc.b[:0], &r.Inputs)
				e.RawJSON(name, sc.b)
			}

		case record.FieldTokensOut:
			e.Int(name, r.TokensOut)
		case record.FieldTokensIn:
			if r.TokensIn != 0 {
				e.Int(name, r.TokensIn)
			}
		case record.FieldCachedTokens:
			if r.CachedReported {
				e.Int(name, r.CachedTokens)
			}
		case record.FieldReasoningTokens:
			if r.ReasoningTokens != 0 {
				e.Int(name, r.ReasoningTokens)
			}
		case record.FieldITL:
			if src.gaps.N > 0 {
				sc.b = appendITL(sc.b[:0], &src.gaps)
				e.RawJSON(name, sc.b)
			}
		case record.FieldStalls:
			if r.Stream.Stalls != 0 {
				e.Int(name, r.Stream.Stalls)
			}
		case record.FieldEvents:
			e.Int(name, r.Stream.Events)
		case record.FieldResidencyMax:
			if r.Stream.MaxResidency > 0 {
				sc.b = appendDuration(sc.b[:0], r.Stream.MaxResidency)
				e.RawJSON(name, sc.b)
			}
		case record.FieldTransportBlocked:
			if stages.Micros(r.Stream.Blocked) > 0 {
				sc.b = appendDuration(sc.b[:0], r.Stream.Blocked)
				e.RawJSON(name, sc.b)
			}
		case record.FieldBuffering:
			if r.Buffering != 0 {
				sc.b = appendBuffering(sc.b[:0], r.Buffering)
				e.RawJSON(name, sc.b)
			}
		case record.FieldBytesIn:
			e.Int64(name, r.BytesIn)
		case record.FieldBytesOut:
			e.Int64(name, r.BytesOut)
		case record.FieldCancelToClose:
			if r.Reason == endreason.ClientCancel {
				sc.b = appendDuration(sc.b[:0], r.CancelToClose)
				e.RawJSON(name, sc.b)
			}
		case record.FieldTokensAfterCancel:
			if r.Reason == endreason.ClientCancel {
				e.Int(name, r.TokensAfterCancel)
			}
		default:
			panic("exporters: no writer for record field " + name)
		}
	}
}

// appendDuration appends d in milliseconds, rounded to the microsecond.
func appendDuration(b []byte, d time.Duration) []byte {
	return stages.AppendMillis(b, stages.Micros(d))
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendStages appends the TTFT stages in stage order, rounded so that
// they add up to ttft_ms exactly (stages.Breakdown.Micros).
func appendStages(b []byte, bd *stages.Breakdown) []byte {
	var us [stages.NumStages]int64
	bd.Micros(&us)
	b = append(b, '{')
	for i, v := range us {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, stageKeys[i]...)
		b = stages.AppendMillis(b, v)
	}
	return append(b, '}')
}

// appendPredicted appends the predicted stages, queue to transport, in
// stage order.
func appendPredicted(b []byte, p *[stages.NumStages]time.Duration) []byte {
	b = append(b, '{')
	for st := stages.Queue; st < stages.NumStages; st++ {
		b = stages.AppendMillis(appendMember(b, stageKeys[st]), stages.Micros(p[st]))
	}
	return append(b, '}')
}

// appendOff appends a prediction's miss: the stage furthest off, and by
// how much (predicted minus measured).
func appendOff(b []byte, st stages.Stage, by time.Duration) []byte {
	b = append(b, `{"stage":"`...)
	b = append(b, st.String()...)
	b = append(b, `","ms":`...)
	b = appendDuration(b, by)
	return append(b, '}')
}

// appendInputs appends a least_ttft choice's inputs to the model: the
// engine's waiting requests only when known, the wait for the requests
// ahead in their prefill only when there is one, the prefix only when the
// index matched one.
func appendInputs(b []byte, in *record.PredictionInputs) []byte {
	b = strconv.AppendInt(append(b, `{"prompt_tokens":`...), int64(in.PromptTokens), 10)
	b = strconv.AppendInt(append(b, `,"in_flight":`...), in.InFlight, 10)
	if in.WaitingKnown {
		b = strconv.AppendInt(append(b, `,"waiting":`...), in.Waiting, 10)
	}
	b = appendDuration(append(b, `,"backlog_ms":`...), in.Backlog)
	if in.Ahead > 0 {
		b = appendDuration(append(b, `,"ahead_ms":`...), in.Ahead)
	}
	if in.PrefixTokens > 0 {
		b = strconv.AppendInt(append(b, `,"prefix_tokens":`...), int64(in.PrefixTokens), 10)
		b = strconv.AppendUint(append(b, `,"prefix_distance":`...), in.PrefixDistance, 10)
	}
	return append(b, '}')
}

// appendEngine appends the engine durations, raw, reported or inferred, in
// stages.EngineDur order.
func appendEngine(b []byte, t *stages.Timeline) []byte {
	b = append(b, '{')
	for d := range stages.NumEngineDurs {
		if v, ok := t.Engine(d); ok {
			b = stages.AppendMillis(appendMember(b, engineKeys[d]), stages.Micros(v))
		}
	}
	return append(b, '}')
}

func appendITL(b []byte, g *stages.Gaps) []byte {
	b = append(b, `{"p50":`...)
	b = stages.AppendMillis(b, stages.Micros(g.P50))
	b = append(b, `,"p99":`...)
	b = stages.AppendMillis(b, stages.Micros(g.P99))
	b = append(b, `,"max":`...)
	b = stages.AppendMillis(b, stages.Micros(g.Max))
	return append(b, '}')
}

func appendBuffering(b []byte, set record.Buffering) []byte {
	b = append(b, '[')
	for i, k := range record.BufferingKinds() {
		if set&(1<<i) == 0 {
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

// The keys of the objects of durations by stage, engine duration and mark
// (memberKeys).
var (
	stageKeys  = memberKeys(stages.NumStages)
	engineKeys = memberKeys(stages.NumEngineDurs)
	markKeys   = memberKeys(stages.NumMarks)
)

// memberKeys returns the names of the values below n as the beginnings of
// JSON object members: "name":. A name must need no escaping.
func memberKeys[K interface {
	~uint8
	String() string
}](n K) []string {
	keys := make([]string, n)
	for k := range n {
		keys[k] = `"` + k.String() + `":`
	}
	return keys
}

// appendMember appends key, a member's beginning from memberKeys, to the
// JSON object b ends in, after a comma unless it is the first member.
func appendMember(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	return append(b, key...)
}
