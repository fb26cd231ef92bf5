package exporters

import (
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Summary is a compact, self-contained copy of a record.Record: everything
// the ring, the pages and the trace exporter need, and nothing pooled. A
// Summary may be kept after the record it came from is reused.
//
// Strings are shared with the record, not copied: Go strings are
// immutable, so this is a copy by the language's rules (the proxy builds
// them with string(...) conversions, never aliases of reused buffers).
type Summary struct {
	RequestID  string
	TraceID    record.TraceID
	SpanID     record.SpanID
	ParentID   record.SpanID
	TraceFlags byte

	Method, Path, Model, Upstream, Key string
	UpstreamConn                       record.UpstreamConn
	Streaming                          bool
	Status                             int
	// The key's quota check (record.Record.QuotaChecked and the rest).
	QuotaChecked, QuotaFallback bool
	QuotaTime                   time.Duration

	Reason endreason.Reason
	Detail endreason.Detail
	Phase  endreason.Phase
	Error  string

	// Timeline is the request's clock, copied by value: marks, engine
	// durations and the wall time of receipt.
	Timeline stages.Timeline
	// Breakdown is Timeline.Breakdown(), computed once at copy time.
	Breakdown stages.Breakdown
	// E2E is Done - Received (0 when Done was not marked).
	E2E time.Duration

	EngineSource   string
	EngineInferred bool
	// EngineLoad says EngineWaiting and EngineRunning were scraped.
	EngineLoad                   bool
	EngineWaiting, EngineRunning int64

	TokensOut, TokensIn int
	ReasoningTokens     int
	UsageReported       bool
	Gaps                stages.Gaps
	Stalls, Events      int
	BytesIn, BytesOut   int64
	MaxResidency        time.Duration
	Blocked             time.Duration // on the client, after the first token
	Buffering           record.Buffering

	CancelToClose     time.Duration
	TokensAfterCancel int
}

// Fill overwrites s with a copy of r. It sorts r's inter-token gaps in
// place (stages.Stream.Gaps) and allocates nothing.
func (s *Summary) Fill(r *record.Record) {
	*s = Summary{
		RequestID: r.RequestID, TraceID: r.TraceID, SpanID: r.SpanID, ParentID: r.ParentID, TraceFlags: r.TraceFlags,
		Method: r.Method, Path: r.Path, Model: r.Model, Upstream: r.Upstream, Key: r.Key, UpstreamConn: r.UpstreamConn,
		Streaming: r.Streaming, Status: r.Status,
		QuotaChecked: r.QuotaChecked, QuotaFallback: r.QuotaFallback, QuotaTime: r.QuotaTime,
		Reason: r.Reason, Detail: r.Detail, Phase: r.Phase, Error: r.Error,
		Timeline:  r.Timeline,
		Breakdown: r.Timeline.Breakdown(),
		E2E:       r.E2E(),

		EngineSource:   r.EngineSource,
		EngineInferred: r.EngineInferred,
		EngineLoad:     r.EngineLoad,
		EngineWaiting:  r.EngineWaiting,
		EngineRunning:  r.EngineRunning,
		TokensOut:      r.TokensOut,
		TokensIn:       r.TokensIn,
		UsageReported:  r.UsageReported,
		Gaps:           r.Stream.Gaps(),
		Stalls:         r.Stream.Stalls,
		Events:         r.Stream.Events,
		BytesIn:        r.BytesIn,
		BytesOut:       r.BytesOut,
		MaxResidency:   r.Stream.MaxResidency,
		Blocked:        r.Stream.Blocked,
		Buffering:      r.Buffering,

		ReasoningTokens: r.ReasoningTokens,

		CancelToClose:     r.CancelToClose,
		TokensAfterCancel: r.TokensAfterCancel,
	}
}

// restore sets r to the record s was filled from, as far as s keeps it:
// the stream's counters but not its gaps (s.Gaps keeps their percentiles).
// The pages write the record's fields from it.
func (s *Summary) restore(r *record.Record) {
	*r = record.Record{
		RequestID: s.RequestID, TraceID: s.TraceID, SpanID: s.SpanID, ParentID: s.ParentID, TraceFlags: s.TraceFlags,
		Method: s.Method, Path: s.Path, Model: s.Model, Upstream: s.Upstream, Key: s.Key, UpstreamConn: s.UpstreamConn,
		Streaming: s.Streaming, Status: s.Status,
		QuotaChecked: s.QuotaChecked, QuotaFallback: s.QuotaFallback, QuotaTime: s.QuotaTime,
		Reason: s.Reason, Detail: s.Detail, Phase: s.Phase, Error: s.Error,
		Timeline: s.Timeline,
		Stream: stages.Stream{
			Stalls:       s.Stalls,
			Events:       s.Events,
			MaxResidency: s.MaxResidency,
			Blocked:      s.Blocked,
		},

		EngineSource:   s.EngineSource,
		EngineInferred: s.EngineInferred,
		EngineLoad:     s.EngineLoad,
		EngineWaiting:  s.EngineWaiting,
		EngineRunning:  s.EngineRunning,
		TokensOut:      s.TokensOut,
		TokensIn:       s.TokensIn,
		UsageReported:  s.UsageReported,
		BytesIn:        s.BytesIn,
		BytesOut:       s.BytesOut,
		Buffering:      s.Buffering,

		ReasoningTokens: s.ReasoningTokens,

		CancelToClose:     s.CancelToClose,
		TokensAfterCancel: s.TokensAfterCancel,
	}
}

// WaitedFirst is how long the client waited for its first token: TTFT when
// one reached it, otherwise the whole request (it waited at least that
// long, and got none). The ring ranks "slowest" by it.
func (s *Summary) WaitedFirst() time.Duration {
	if s.Breakdown.OK {
		return s.Breakdown.TTFT
	}
	return s.E2E
}

// SegmentKind says what a Segment of a request's waterfall is.
type SegmentKind uint8

// The segment kinds.
const (
	// SegStage is a stage of TTFT (stages.Stage), or, for a request that
	// got no first token, a proxy stage it passed.
	SegStage SegmentKind = iota
	// SegDecode runs from the first token to the last one: for a model
	// that reasoned before it answered, a segment named reasoning to the
	// first answer token, then one named decode.
	SegDecode
	// SegFinish runs from the end of TTFT or the last token, whichever is
	// later, to Done: the final chunk, [DONE], closing.
	SegFinish
	// SegOpen is the stage a request without a first token was in when it
	// ended; it runs to Done.
	SegOpen
)

var segKindNames = [...]string{"stage", "decode", "finish", "open"}

func (k SegmentKind) String() string {
	if int(k) < len(segKindNames) {
		return segKindNames[k]
	}
	return "segment?"
}

// Segment is one bar of a request's waterfall, on the request's own clock
// (offsets from Received).
type Segment struct {
	Name       string
	Kind       SegmentKind
	Start, End time.Duration
}

// Dur is End - Start.
func (g Segment) Dur() time.Duration { return g.End - g.Start }

// Segment names that are not stage names.
const (
	SegNameDecode    = "decode"
	SegNameReasoning = "reasoning"
	SegNameFinish    = "finish"
	SegNameUpstream  = "upstream"
)

// Segments appends s's waterfall to dst and returns it: the TTFT stages
// then decode and finish for a request that got a first token
// (tokenSegments), the stages up to the one it ended in otherwise
// (tokenlessSegments).
func (s *Summary) Segments(dst []Segment) []Segment {
	if s.Breakdown.OK {
		return s.tokenSegments(dst)
	}
	return s.tokenlessSegments(dst)
}

// tokenSegments appends the eight TTFT stages laid end to end from 0 in
// stage order (they are contiguous and the last ends at TTFT exactly),
// then decode (FirstToken to LastToken, when a last token was marked) and
// finish (to Done, when Done is after the later of TTFT and LastToken).
// When the model reasoned and its answer began after the first token (or
// never came), decode is split where the answer began: reasoning
// (FirstToken to FirstAnswer, or to LastToken without an answer), then
// decode from there.
func (s *Summary) tokenSegments(dst []Segment) []Segment {
	t := &s.Timeline
	var at time.Duration
	for i, d := range s.Breakdown.Stages {
		dst = append(dst, Segment{Name: stages.Stage(i).String(), Kind: SegStage, Start: at, End: at + d})
		at += d
	}
	end := at
	first, okF := t.At(stages.FirstToken)
	last, okL := t.At(stages.LastToken)
	if okF && okL {
		first = min(first, at)
		last = max(last, first)
		answer, answered := t.At(stages.FirstAnswer)
		if s.ReasoningTokens > 0 && (!answered || answer > at) {
			split := last
			if answered {
				split = min(answer, last)
			}
			dst = append(dst, Segment{Name: SegNameReasoning, Kind: SegDecode, Start: first, End: split})
			first = split
		}
		if answered || s.ReasoningTokens == 0 {
			dst = append(dst, Segment{Name: SegNameDecode, Kind: SegDecode, Start: first, End: last})
		}
		end = max(end, last)
	}
	if done, ok := t.At(stages.Done); ok && done > end {
		dst = append(dst, Segment{Name: SegNameFinish, Kind: SegFinish, Start: end, End: done})
	}
	return dst
}

// tokenlessSegments appends the proxy stages the request passed (gateway,
// route, queue, on proxy marks only), then the stage it was in when it
// ended, as SegOpen up to Done: "gateway", "route" or "queue" when it
// ended before admission, "upstream" when it was admitted (waiting on the
// upstream). Zero-length stages are kept so the layout has a fixed shape.
func (s *Summary) tokenlessSegments(dst []Segment) []Segment {
	t := &s.Timeline
	done, _ := t.At(stages.Done)
	var prev time.Duration
	for _, m := range [...]struct {
		mark stages.Mark
		name string
	}{
		{stages.GatewayDone, stages.Gateway.String()},
		{stages.Routed, stages.Route.String()},
		{stages.Admitted, stages.Queue.String()},
	} {
		at, ok := t.At(m.mark)
		if !ok {
			return append(dst, Segment{Name: m.name, Kind: SegOpen, Start: prev, End: max(done, prev)})
		}
		at = max(at, prev)
		dst = append(dst, Segment{Name: m.name, Kind: SegStage, Start: prev, End: at})
		prev = at
	}
	return append(dst, Segment{Name: SegNameUpstream, Kind: SegOpen, Start: prev, End: max(done, prev)})
}

// millis is d in milliseconds, rounded to the microsecond.
func millis(d time.Duration) float64 { return float64(stages.Micros(d)) / 1000 }
