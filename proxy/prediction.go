package proxy

import (
	"time"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// The predictor's parts are the stages from Queue on, in order.
var _ = [1]struct{}{}[predict.NumParts-predict.Part(stages.NumStages-stages.Queue)]

// recordChoice puts into rec how c, the choice of req's pool, chose its
// upstream (a retry's choice replaces the first's): in a least_ttft pool,
// with what it predicted from.
func recordChoice(rec *record.Record, c *gateway.Choice, req *gateway.Request) {
	policy := req.Route.Pool.Policy
	rec.Policy, rec.Predicted, rec.Prediction = policy, c.Predicted, [stages.NumStages]time.Duration{}
	if c.Predicted {
		copy(rec.Prediction[stages.Queue:], c.Prediction.Parts[:])
	}
	rec.PrefixAffinity, rec.CachedExpected, rec.Probe = c.Affinity, c.Expected.Cached, c.Probe
	if c.Prediction.Evicted {
		rec.CachedExpected = 0 // the model expects the engine to have evicted it
	}
	rec.Inputs = record.PredictionInputs{}
	if policy == gateway.PolicyLeastTTFT {
		l, x := &c.Load, &c.Expected
		rec.Inputs = record.PredictionInputs{Set: true, PromptTokens: req.PromptTokens,
			InFlight: l.InFlight, Waiting: l.Waiting, WaitingKnown: l.EngineKnown, Backlog: l.Backlog, Ahead: l.Ahead,
			PrefixTokens: x.Cached, PrefixDistance: x.Distance}
	}
}

// learn teaches the request's upstream's TTFT model what the request
// measured, whatever pool it was in (gateway.Upstream.Observe), and records
// how far the prediction it was routed with, if any, was off. Only a
// request with a first token has a split to learn.
//
// It learns the split the request ended with: an engine whose own split
// arrives later in a span (spanjoin) is learned, and its prediction
// compared, unsplit, as its record was when the request ended.
func (x *exchange) learn() {
	up, rec := x.lease.up, &x.fin.rec
	if up == nil {
		return
	}
	bd := rec.Breakdown()
	if !bd.OK {
		return
	}
	o := predict.Observation{
		End: x.p.gw.Now(), FirstToken: true, Unsplit: bd.Unsplit, PromptTokens: x.lease.promptEst,
		CachedTokens: rec.CachedTokens, CachedReported: rec.CachedReported, Expected: x.lease.choice.Expected,
		Load: x.lease.choice.Load,
	}
	copy(o.Parts[:], bd.Stages[stages.Queue:])
	if rec.UsageReported && rec.TokensIn > 0 {
		o.PromptTokens, o.EstimatedTokens = rec.TokensIn, x.lease.promptEst
	}
	up.Observe(&x.lease.choice, o)
	if c := &x.lease.choice; c.Predicted {
		m := predict.Compare(c.Prediction.Parts, o.Parts)
		rec.PredictionOff, rec.PredictionOffBy = stages.Queue+stages.Stage(m.Part), m.By
	}
}
