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
		Upstream: "a", Policy: "least_ttft", Stream: true, HasTTFT: true, TokensIn: prompt, CachedReported: true}
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

// TestReplayLoad: the backlog and the wait for the requests ahead in
// their prefill a request is asked with are, by default, replayed: the
// engine time the replay's own predictions routed to the upstream and not
// yet done, and what is left of the predicted TTFT of the requests it
// routed there whose first token had not come; with RecordedBacklog, the
// record's. The queue is predicted at least as long as the wait.
func TestReplayLoad(t *testing.T) {
	recs := []bench.Record{req(1000, 100, true), req(2000, 100, true), req(2001, 100, true), req(2500, 100, true)}
	recs[2].Inputs.Backlog, recs[2].Inputs.Ahead = time.Hour, time.Hour
	between := func(lo, hi time.Duration) func(time.Duration) bool {
		return func(d time.Duration) bool { return d > lo && d < hi }
	}
	hour := func(d time.Duration) bool { return d == time.Hour }
	for _, tt := range []struct {
		recorded             bool
		wantBacklog, wantAhd func(time.Duration) bool
	}{
		// The second was predicted 100 ms of prefill and about 106 ms in
		// all at 2000 ms (routed at 2000.1): at 2001.1 ms, 99 ms of the
		// prefill and about 105 ms of the TTFT are left.
		{false, between(98*time.Millisecond, 100*time.Millisecond), between(100*time.Millisecond, 106*time.Millisecond)},
		{true, hour, hour},
	} {
		res := Run(recs, Options{RecordedBacklog: tt.recorded})
		a := res.Asked[2]
		if !a.OK || !tt.wantBacklog(a.Load.Backlog) || !tt.wantAhd(a.Load.Ahead) || a.Prediction.Parts[predict.Queue] < a.Load.Ahead {
			t.Fatalf("recorded %v: the third asked with a backlog of %v, %v ahead, predicted a queue of %v",
				tt.recorded, a.Load.Backlog, a.Load.Ahead, a.Prediction.Parts[predict.Queue])
		}
		// The fourth comes after both had their first token.
		if got := res.Asked[3].Load.Ahead; !tt.recorded && got != 0 {
			t.Fatalf("the fourth asked with %v ahead: want 0", got)
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
