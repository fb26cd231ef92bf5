// Package replay replays a least_ttft pool's records through fresh TTFT
// models (gateway/predict), one per upstream, and says how far their
// predictions were from what the requests measured.
//
// Each record carries what its upstream's model was asked when the
// request was routed (prediction_inputs: the prompt's estimate, the load,
// the prefix the index expected cached). The replay walks the records'
// routings and ends in time order: a model is taught each request that
// ended (as the proxy teaches it, gateway.Upstream.Observe) and asked, at
// each routing, the question the record says was asked. With the model
// the proxy ran, it predicts what the records say was predicted (Result's
// Agreed); with another (a change to gateway/predict, another half-life),
// it tells on the same requests how far that one would have been off,
// which a rerun of the benchmark cannot: runs of the same code differ more
// than most changes move the error. What it cannot replay is the routing a
// different model would have chosen: the requests stay where they went.
package replay

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/stages"
)

// Options are a replay's settings.
type Options struct {
	// Model is the models' configuration (HalfLife 0: predict's default).
	Model predict.Config
	// RecordedBacklog takes each request's backlog, and its wait for the
	// requests ahead in their prefill, as recorded. Otherwise both are
	// replayed: the engine time the replay's own predictions routed to the
	// upstream and not yet done, and the requests routed there without
	// their first token yet (due at the replay's own predictions), as the
	// gateway counts them (gateway.Snapshot.Commit), so that a model that
	// predicts otherwise is asked about the load it would have counted.
	RecordedBacklog bool
}

// agreeWithin is how close a replayed prediction must be to the recorded
// one to agree: the larger of a share of it and the log's resolution.
const (
	agreeShare = 0.01
	agreeFloor = 10 * time.Microsecond
)

// Errors are prediction errors, |predicted − measured| / measured TTFT,
// of some requests.
type Errors struct {
	N        int
	P50, P90 float64
}

func errorsOf(e []float64) Errors {
	if len(e) == 0 {
		return Errors{}
	}
	slices.Sort(e)
	return Errors{N: len(e), P50: e[len(e)/2], P90: e[min(len(e)*9/10, len(e)-1)]}
}

// Result is what a replay found.
type Result struct {
	// Routed is the records with prediction_inputs (a least_ttft pool's
	// choices) that reached an upstream; Predicted those of them the
	// replay's models predicted, and Measured those of them with a first
	// token, whose error counts.
	Routed, Predicted, Measured int
	// Compared is the Predicted whose record holds a prediction too;
	// Agreed those within 1 % (or 10 µs) of it.
	Compared, Agreed int
	// Error is the replay's error over Measured; Recorded the recorded
	// predictions' over those of them that had one.
	Error, Recorded Errors
	// ByUpstream is Error by upstream, in Upstreams' order (first seen).
	Upstreams  []string
	ByUpstream []Errors
	// ByCache is Error over the misses ([0]) and the hits ([1]): the
	// engine reported at least half the prompt cached (the records with
	// no cached count are in neither).
	ByCache [2]Errors
	// PartError is, per predicted part, the median of
	// |predicted − measured| / measured TTFT over Measured.
	PartError [predict.NumParts]float64
	// Asked is, by record (in the order given), what the replay asked the
	// record's upstream's model and what it answered (zero for a record
	// not routed with inputs).
	Asked []Asked
}

// Asked is one routing's question to its upstream's model and the answer.
type Asked struct {
	// Load is the load asked with: the record's, the backlog replayed
	// unless Options.RecordedBacklog.
	Load predict.Load
	// Prediction is the model's answer, when OK.
	Prediction predict.Prediction
	OK         bool
}

// event is a request's routing, its first token (or its end, without
// one) or its end, at a time since the first record's receipt.
type event struct {
	at    time.Duration
	i     int // the record's index
	first bool
	end   bool
}

// Run replays recs, in any order. Give it one replica's records, or,
// where the replicas shared their routing (share_routing), all of theirs
// with RecordedBacklog: each model then learns from every replica's
// requests, as the shared models did, and each request is asked with the
// backlog it was routed with (which counted every replica's).
func Run(recs []bench.Record, o Options) Result {
	var res Result
	var t0 time.Time
	for i := range recs {
		if t := recs[i].Time; !t.IsZero() && (t0.IsZero() || t.Before(t0)) {
			t0 = t
		}
	}
	evs := make([]event, 0, 2*len(recs))
	for i := range recs {
		r := &recs[i]
		if r.Upstream == "" || r.Time.IsZero() {
			continue
		}
		start := r.Time.Sub(t0)
		// Routed at the end of the route stage; a record without a first
		// token has no stages, and is taken as routed on receipt.
		first := start + r.E2E
		if r.HasTTFT {
			first = start + r.TTFT
		}
		evs = append(evs, event{at: start + r.Stages[stages.Gateway] + r.Stages[stages.Route], i: i},
			event{at: first, i: i, first: true}, event{at: start + r.E2E, i: i, end: true})
	}
	// In time; at the same instant a routing first, then a first token,
	// then an end.
	slices.SortStableFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return kind(a) - kind(b)
	})

	models := map[string]*predict.Model{}
	busy := map[string]time.Duration{}             // the replayed backlog's end, by upstream
	prefilling := map[string]*predict.Prefilling{} // the replayed requests without a first token, by upstream
	prefillID := make([]uint64, len(recs))         // by record
	byUp := map[string][]float64{}
	res.Asked = make([]Asked, len(recs))
	asked := res.Asked
	var all, recorded []float64
	var byCache [2][]float64
	var parts [predict.NumParts][]float64
	for _, ev := range evs {
		r := &recs[ev.i]
		m := models[r.Upstream]
		if m == nil {
			m = predict.New(o.Model)
			models[r.Upstream] = m
			res.Upstreams = append(res.Upstreams, r.Upstream)
		}
		in := &r.Inputs
		x := predict.Expected{Cached: in.PrefixTokens, Distance: in.PrefixDistance}
		pf := prefilling[r.Upstream]
		if pf == nil {
			pf = new(predict.Prefilling)
			prefilling[r.Upstream] = pf
		}
		if ev.first {
			pf.Remove(prefillID[ev.i])
			continue
		}
		if !ev.end {
			if !in.Set {
				continue
			}
			res.Routed++
			load := predict.Load{InFlight: in.InFlight, Waiting: in.Waiting, EngineKnown: in.WaitingKnown, Backlog: in.Backlog, Ahead: in.Ahead}
			if !o.RecordedBacklog {
				load.Backlog, load.Ahead = max(busy[r.Upstream]-ev.at, 0), pf.Wait(ev.at)
			}
			pred, ok := m.Predict(ev.at, in.PromptTokens, x, load)
			due := ev.at
			if ok {
				busy[r.Upstream] = max(busy[r.Upstream], ev.at) + pred.Work()
				due += pred.Total
			}
			if r.Stream { // as the gateway tracks only streamed requests (Commit)
				prefillID[ev.i] = pf.Add(ev.at, due)
			}
			asked[ev.i] = Asked{Load: load, Prediction: pred, OK: ok}
			continue
		}
		if !r.HasTTFT {
			continue
		}
		// Taught as the proxy's learn does.
		obs := predict.Observation{End: ev.at, FirstToken: true, Unsplit: r.Unsplit, PromptTokens: in.PromptTokens,
			CachedTokens: r.CachedTokens, CachedReported: r.CachedReported, Expected: x, Load: asked[ev.i].Load}
		if !in.Set {
			obs.PromptTokens = r.TokensIn // no estimate recorded: the engine's count stands for it
		} else if r.TokensIn > 0 {
			obs.PromptTokens, obs.EstimatedTokens = r.TokensIn, in.PromptTokens
		}
		copy(obs.Parts[:], r.Stages[stages.Queue:])
		m.Observe(obs)

		a := &asked[ev.i]
		if !a.OK {
			continue
		}
		res.Measured++
		before := r.Stages[stages.Gateway] + r.Stages[stages.Route]
		ttft := float64(r.TTFT)
		e := math.Abs(float64(before+a.Prediction.Total)-ttft) / ttft
		all = append(all, e)
		byUp[r.Upstream] = append(byUp[r.Upstream], e)
		if r.CachedReported && obs.PromptTokens > 0 {
			hit := boolInt(r.CachedTokens*2 >= obs.PromptTokens)
			byCache[hit] = append(byCache[hit], e)
		}
		for p := range predict.NumParts {
			parts[p] = append(parts[p], math.Abs(float64(a.Prediction.Parts[p]-obs.Parts[p]))/ttft)
		}
		if r.Predicted {
			recorded = append(recorded, math.Abs(float64(before+predictedPastRoute(r))-ttft)/ttft)
		}
	}
	for i := range recs {
		r, a := &recs[i], &asked[i]
		if !a.OK {
			continue
		}
		res.Predicted++
		if !r.Predicted {
			continue
		}
		res.Compared++
		was := predictedPastRoute(r)
		if d := a.Prediction.Total - was; max(d, -d) <= max(time.Duration(agreeShare*float64(was)), agreeFloor) {
			res.Agreed++
		}
	}
	res.Error, res.Recorded = errorsOf(all), errorsOf(recorded)
	for _, u := range res.Upstreams {
		res.ByUpstream = append(res.ByUpstream, errorsOf(byUp[u]))
	}
	for i := range byCache {
		res.ByCache[i] = errorsOf(byCache[i])
	}
	for p := range parts {
		if e := errorsOf(parts[p]); e.N > 0 {
			res.PartError[p] = e.P50
		}
	}
	return res
}

// predictedPastRoute is the recorded prediction's total, queue to
// transport.
func predictedPastRoute(r *bench.Record) time.Duration {
	var d time.Duration
	for _, p := range r.Prediction {
		d += p
	}
	return d
}

// kind orders events at one instant: a routing, a first token, an end.
func kind(e event) int {
	switch {
	case e.end:
		return 2
	case e.first:
		return 1
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Write prints r as Markdown: the counts, the errors (overall, by
// upstream, by hit and miss) and the parts' errors.
func (r *Result) Write(w io.Writer) {
	fmt.Fprintf(w, "Replayed %d least_ttft routings on %d upstreams: %d predicted, %d of them with a first token (the error's).\n",
		r.Routed, len(r.Upstreams), r.Predicted, r.Measured)
	if r.Compared > 0 {
		fmt.Fprintf(w, "Agreement with the recorded predictions: %d of %d within 1 %% (the model the proxy ran agrees; another model, or a half-life changed, need not).\n",
			r.Agreed, r.Compared)
	}
	fmt.Fprintf(w, "\nPrediction error, |predicted − measured| / measured TTFT:\n\n| requests | n | error p50 | error p90 |\n| --- | --- | --- | --- |\n")
	row := func(name string, e Errors) {
		if e.N > 0 {
			fmt.Fprintf(w, "| %s | %d | %.1f %% | %.1f %% |\n", name, e.N, 100*e.P50, 100*e.P90)
		}
	}
	row("all, replayed", r.Error)
	row("all, as recorded", r.Recorded)
	for i, u := range r.Upstreams {
		row("upstream "+u, r.ByUpstream[i])
	}
	row("misses (the engine computed most of the prompt)", r.ByCache[0])
	row("hits (the engine had at least half cached)", r.ByCache[1])
	fmt.Fprintf(w, "\nPer part, the median of |predicted − measured| / measured TTFT:\n\n|")
	for p := range predict.NumParts {
		fmt.Fprintf(w, " %s |", p)
	}
	fmt.Fprintf(w, "\n|%s\n|", strings.Repeat(" --- |", int(predict.NumParts)))
	for _, e := range r.PartError {
		fmt.Fprintf(w, " %.1f %% |", 100*e)
	}
	fmt.Fprintln(w)
}
