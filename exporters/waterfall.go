package exporters

import (
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

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
	// SegPredicted is a stage, queue to transport, as a least_ttft pool
	// predicted it when it routed the request (record.Record.Prediction):
	// not a time the request spent, but one to set beside the measured
	// stage of the same name.
	SegPredicted
)

var segKindNames = [...]string{"stage", "decode", "finish", "open", "predicted"}

func (k SegmentKind) String() string {
	if int(k) < len(segKindNames) {
		return segKindNames[k]
	}
	return "segment?"
}

// Segment is one bar of a request's waterfall, on the request's own clock
// (offsets from Received). Inferred marks the part of a stage that the
// proxy inferred rather than read from the engine (stages.Timeline.Inferred).
type Segment struct {
	Name       string
	Kind       SegmentKind
	Inferred   bool
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
	// SegNameLoad is a model load the engine reported, inside the queue
	// stage (stages.EngineLoad).
	SegNameLoad = "load"
)

// maxSegments bounds how many segments Segments appends for one record
// (each TTFT stage and its inferred part, the load; reasoning, decode,
// finish; the predicted stages): a buffer this long takes any waterfall
// without growing.
const maxSegments = int(2*stages.NumStages+1) + 3 + int(stages.NumStages-stages.Queue)

// Segments appends r's waterfall to dst and returns it: the TTFT stages
// then decode and finish for a request that got a first token
// (tokenSegments), the stages up to the one it ended in otherwise
// (tokenlessSegments); then, for a request routed with a prediction
// (r.Predicted), the predicted stages (predictedSegments) from where its
// measured route stage ended. A request without a first token keeps its
// prediction: it was made, and shows what the request was expected to
// wait.
func Segments(dst []Segment, r *record.Record) []Segment {
	var routed time.Duration
	if bd := r.Breakdown(); bd.OK {
		dst = tokenSegments(dst, r, &bd)
		routed = bd.Stages[stages.Gateway] + bd.Stages[stages.Route]
	} else {
		dst, routed = tokenlessSegments(dst, &r.Timeline)
	}
	if r.Predicted {
		dst = predictedSegments(dst, &r.Prediction, routed)
	}
	return dst
}

// predictedSegments appends the predicted stages p, queue to transport, as
// SegPredicted bars named by stage, laid end to end from routed: each can
// be set beside its measured bar, and the last ends at the predicted TTFT
// (record.Record.PredictedTTFT). Zero-length ones are kept so the
// prediction has a fixed shape.
func predictedSegments(dst []Segment, p *[stages.NumStages]time.Duration, routed time.Duration) []Segment {
	at := routed
	for st := stages.Queue; st < stages.NumStages; st++ {
		dst = append(dst, Segment{Name: st.String(), Kind: SegPredicted, Start: at, End: at + p[st]})
		at += p[st]
	}
	return dst
}

// tokenSegments appends the eight TTFT stages laid end to end from 0 in
// stage order (they are contiguous and the last ends at TTFT exactly), each
// followed by its parts that are their own bars (stageSegments), then decode (FirstToken to LastToken, when a last token was marked) and
// finish (to Done, when Done is after the later of TTFT and LastToken).
// When the model reasoned and its answer began after the first token (or
// never came), decode is split where the answer began: reasoning
// (FirstToken to FirstAnswer, or to LastToken without an answer), then
// decode from there.
func tokenSegments(dst []Segment, r *record.Record, bd *stages.Breakdown) []Segment {
	t := &r.Timeline
	var at time.Duration
	for i := range bd.Stages {
		dst, at = stageSegments(dst, stages.Stage(i), bd, t.Inferred(), at)
	}
	end := at
	first, okF := t.At(stages.FirstToken)
	last, okL := t.At(stages.LastToken)
	if okF && okL {
		first = min(first, at)
		last = max(last, first)
		answer, answered := t.At(stages.FirstAnswer)
		if r.ReasoningTokens > 0 && (!answered || answer > at) {
			split := last
			if answered {
				split = min(answer, last)
			}
			dst = append(dst, Segment{Name: SegNameReasoning, Kind: SegDecode, Start: first, End: split})
			first = split
		}
		if answered || r.ReasoningTokens == 0 {
			dst = append(dst, Segment{Name: SegNameDecode, Kind: SegDecode, Start: first, End: last})
		}
		end = max(end, last)
	}
	if done, ok := t.At(stages.Done); ok && done > end {
		dst = append(dst, Segment{Name: SegNameFinish, Kind: SegFinish, Start: end, End: done})
	}
	return dst
}

// stageSegments appends stage st's bars from at and returns where they
// end: the stage itself, less what follows it; a model load the engine
// reported (load, within queue); the part of the stage the proxy inferred
// (the stage's name, Inferred). The last two only when not empty.
func stageSegments(dst []Segment, st stages.Stage, bd *stages.Breakdown, inferred stages.EngineSet, at time.Duration) ([]Segment, time.Duration) {
	var load, guess time.Duration
	for d, v := range bd.Parts {
		switch e := stages.EngineDur(d); {
		case e.Stage() != st:
		case inferred.Has(e):
			guess += v
		case e == stages.EngineLoad:
			load += v
		}
	}
	own := bd.Stages[st] - load - guess
	dst = append(dst, Segment{Name: st.String(), Kind: SegStage, Start: at, End: at + own})
	at += own
	if load > 0 {
		dst = append(dst, Segment{Name: SegNameLoad, Kind: SegStage, Start: at, End: at + load})
		at += load
	}
	if guess > 0 {
		dst = append(dst, Segment{Name: st.String(), Kind: SegStage, Inferred: true, Start: at, End: at + guess})
		at += guess
	}
	return dst, at
}

// tokenlessSegments appends the proxy stages the request passed (gateway,
// route, queue, on proxy marks only), then the stage it was in when it
// ended, as SegOpen up to Done: "gateway", "route" or "queue" when it
// ended before admission, "upstream" when it was admitted (waiting on the
// upstream). Zero-length stages are kept so the layout has a fixed shape.
// It returns where the route stage ended: its bar's end, or, when the
// request ended before routing was over, the open bar's.
func tokenlessSegments(dst []Segment, t *stages.Timeline) ([]Segment, time.Duration) {
	done, _ := t.At(stages.Done)
	var prev, routed time.Duration
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
			return append(dst, Segment{Name: m.name, Kind: SegOpen, Start: prev, End: max(done, prev)}), max(done, prev)
		}
		at = max(at, prev)
		dst = append(dst, Segment{Name: m.name, Kind: SegStage, Start: prev, End: at})
		prev = at
		if m.mark == stages.Routed {
			routed = at
		}
	}
	return append(dst, Segment{Name: SegNameUpstream, Kind: SegOpen, Start: prev, End: max(done, prev)}), routed
}

// millis is d in milliseconds, rounded to the microsecond.
func millis(d time.Duration) float64 { return float64(stages.Micros(d)) / 1000 }
