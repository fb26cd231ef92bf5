package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// req is a request to upstream "a" received at ms after t0, whose prefill
// of prompt tokens took 1 ms each, 5 ms of queue and 1 ms of the rest.
func req(atMs, prompt int, inputs bool) bench.Record {
	r := bench.Record{RequestID: "r", EndReason: "stop", Time: t0.Add(time.Duration(atMs) * time.Millisecond),
		Upstream: "a", Policy: "least_ttft", HasTTFT: true, TokensIn: prompt, CachedReported: true}
	r.Stages[stages.Gateway] = 100 * time.Microsecond
	r.Stages[stages.Queue] = 5 * time.Millisecond
	r.Stages[stages.Prefill] = time.Duration(prompt) * time.Millisecond
	r.Stages[stages.FirstDecode] = time.Millisecond
	for _, d := range r.Stages {
		r.TTFT += d
	}
	r.E2E = r.TTFT + 10*time.Millisecond
	if inputs {
		r.Inputs = record.PredictionInputs{Set: true, PromptTokens: prompt}
	}
	return r
}

// TestReplayTeachesOnlyWhatHadEnded: a request is predicted by a model
// taught the requests that ended before it was routed, not those still
// running: the first request, and the second (routed while the first
// ran), have no prediction; the third is predicted from the first two,
// the fourth from all three. A record without inputs (another pool's)
// teaches the model but is not predicted.
func TestReplayTeachesOnlyWhatHadEnded(t *testing.T) {
	recs := []bench.Record{
		req(1000, 100, true), // ends at about 1116 ms
		req(1050, 200, true), // routed before the first ended
		req(1500, 300, false),
		req(2000, 150, true),
		req(3000, 250, true),
	}
	res := Run(recs, Options{})
	if res.Routed != 4 || res.Predicted != 2 || res.Measured != 2 {
		t.Fatalf("routed %d, predicted %d, measured %d: want 4, 2, 2", res.Routed, res.Predicted, res.Measured)
	}
	// Prefill is exactly a line through the origin, queue and first
	// decode constant: the predictions are exact.
	if res.Error.P90 > 0.001 {
		t.Fatalf("error p90 %.4f: want the exact line", res.Error.P90)
	}
	if len(res.Upstreams) != 1 || res.Upstreams[0] != "a" || res.ByCache[0].N != 2 || res.ByCache[1].N != 0 {
		t.Fatalf("upstreams %v, by cache %+v", res.Upstreams, res.ByCache)
	}
}

// TestReplayAgreesWithRecordedPredictions: records whose predictions were
// those of the model replayed agree; one whose recorded prediction was
// otherwise does not; a half-life so short the model forgets does not
// agree with them all.
func TestReplayAgreesWithRecordedPredictions(t *testing.T) {
	recs := []bench.Record{req(1000, 100, true), req(2000, 200, true), req(4000, 150, true), req(4500, 120, true)}
	// Record what the replayed model predicts, as a proxy running it would
	// have.
	m := predict.New(predict.Config{})
	for i := range recs {
		at := recs[i].Time.Sub(t0) + recs[i].Stages[stages.Gateway]
		if p, ok := m.Predict(at, recs[i].Inputs.PromptTokens, predict.Expected{}, predict.Load{}); ok {
			recs[i].Predicted = true
			copy(recs[i].Prediction[stages.Queue:], p.Parts[:])
		}
		o := predict.Observation{End: recs[i].Time.Sub(t0) + recs[i].E2E, FirstToken: true, PromptTokens: recs[i].TokensIn,
			EstimatedTokens: recs[i].Inputs.PromptTokens, CachedReported: true}
		copy(o.Parts[:], recs[i].Stages[stages.Queue:])
		m.Observe(o)
	}
	if res := Run(recs, Options{}); res.Compared != 3 || res.Agreed != 3 {
		t.Fatalf("compared %d, agreed %d: want 3 of 3", res.Compared, res.Agreed)
	}
	recs[3].Prediction[stages.Prefill] *= 2
	if res := Run(recs, Options{}); res.Compared != 3 || res.Agreed != 2 {
		t.Fatalf("one prediction doubled: compared %d, agreed %d: want 2 of 3", res.Compared, res.Agreed)
	}
}

// TestReplayBacklog: the backlog a request is asked with is, by default,
// the engine time the replay's own predictions routed there and not yet
// done; with RecordedBacklog, the record's.
func TestReplayBacklog(t *testing.T) {
	recs := []bench.Record{req(1000, 100, true), req(2000, 100, true), req(2001, 100, true)}
	recs[2].Inputs.Backlog = time.Hour
	for _, tt := range []struct {
		recorded bool
		want     func(time.Duration) bool
	}{
		// The second was predicted 100 ms of prefill at 2000 ms (routed
		// at 2000.1): at 2001.1 ms, 99 ms of it are left.
		{false, func(b time.Duration) bool { return b > 98*time.Millisecond && b < 100*time.Millisecond }},
		{true, func(b time.Duration) bool { return b == time.Hour }},
	} {
		res := Run(recs, Options{RecordedBacklog: tt.recorded})
		if got := res.Asked[2].Load.Backlog; res.Predicted != 2 || !tt.want(got) {
			t.Fatalf("recorded %v: predicted %d, the third asked with a backlog of %v", tt.recorded, res.Predicted, got)
		}
	}
}

// TestWrite: the report names the counts, the agreement and every part.
func TestWrite(t *testing.T) {
	res := Run([]bench.Record{req(1000, 100, true), req(2000, 200, true), req(3000, 150, true)}, Options{})
	var b bytes.Buffer
	res.Write(&b)
	for _, want := range []string{"Replayed 3 least_ttft routings on 1 upstreams: 2 predicted", "| all, replayed | 2 |", "| upstream a | 2 |", "| queue |", "| transport |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}
