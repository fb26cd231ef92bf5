package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// finalizer owns a request's record: the facts gathered on the way are
// classified into the end reason once, and the record is emitted exactly
// once (the exchange's finish drives it).
type finalizer struct {
	log   *zerolog.Logger // set once per exchange
	rec   record.Record
	facts endreason.Facts
	done  bool // the record was emitted
}

// reset readies f for another request, keeping the record's buffers.
func (f *finalizer) reset() {
	f.rec.Stream.Release()
	f.rec.Reset()
	f.facts, f.done = endreason.Facts{}, false
}

// fail records err as the request's error, unless one is already recorded,
// and returns it.
func (f *finalizer) fail(err error) error {
	if f.rec.Error == "" {
		f.rec.Error = err.Error()
	}
	return err
}

// panicked turns a panic on the request path into an error and a record
// entry; the process keeps serving.
func (f *finalizer) panicked(v any) error {
	err := fmt.Errorf("proxy panic: %v", v)
	f.log.Error().Str("request_id", f.rec.RequestID).Err(err).Msg("recovered")
	f.facts.Rejected, f.facts.RejectedDetail = endreason.WorkerFailure, endreason.DetailProxyPanic
	f.rec.Error = err.Error()
	return err
}

// classify decides the end reason from the facts and the abort cause (with
// the cancellation's cost: the time from the abort to closing the upstream).
func (f *finalizer) classify(cause error, abortedAt, closedAt time.Duration) {
	var de *deadlineError
	switch {
	case cause == nil:
	case cause == errClientGone, cause == errClientStalled:
		f.facts.ClientGone, f.facts.ClientStalled = true, cause == errClientStalled
		if closedAt > 0 {
			f.rec.CancelToClose = max(closedAt-abortedAt, 0)
		}
	case errors.As(cause, &de):
		f.facts.Deadline = de.detail
		if f.rec.Error == "" {
			f.rec.Error = de.msg
		}
	}
	f.rec.Reason, f.rec.Detail = endreason.Classify(f.facts)
}

// detailGuess is the end detail the record will carry, known before the
// end: the machine-readable code of an error body.
func (f *finalizer) detailGuess(abortCause error) endreason.Detail {
	facts := f.facts
	var de *deadlineError
	if errors.As(abortCause, &de) {
		facts.Deadline = de.detail
	}
	_, d := endreason.Classify(facts)
	return d
}

// complete fills what is known only after the gateway settled: the phase a
// cancel happened in (from the proxy's marks and the engine's word), and
// the output tokens counted from content events where the upstream
// reported no usage.
func (f *finalizer) complete(enginePhase endreason.Phase) {
	rec := &f.rec
	if rec.Reason == endreason.ClientCancel {
		tl := &rec.Timeline
		rec.Phase = endreason.PhaseOf(tl.Has(stages.Admitted), tl.Has(stages.FirstToken), enginePhase)
	}
	if !rec.UsageReported {
		rec.TokensOut = rec.Stream.ContentEvents
	}
}
