package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// Part indexes the parts of a client-seen TTFT: the proxy's stages
// (stages.Stage, same order) followed by Outside.
type Part int

// Outside is the part of the client-seen TTFT the proxy did not see:
// client TTFT − proxy TTFT.
const Outside = Part(stages.NumStages)

// NumParts is the number of parts: the stages and Outside.
const NumParts = int(stages.NumStages) + 1

// String is the stage's name, or "outside".
func (p Part) String() string {
	if p == Outside {
		return "outside"
	}
	return stages.Stage(p).String()
}

// Record is the proxy's record of one request, as the admin endpoint
// (/debug/requests/{id}) and the JSON log line both write it. Only the
// fields the probe and the report use are kept; durations are converted
// from the JSON's milliseconds.
type Record struct {
	RequestID string
	Path      string
	Model     string
	Status    int
	EndReason string
	EndDetail string
	Phase     string
	// HasTTFT says a first token reached the client; TTFT and Stages are
	// zero otherwise.
	HasTTFT bool
	TTFT    time.Duration
	E2E     time.Duration
	Stages  [stages.NumStages]time.Duration
	// Engine holds the engine's raw durations by name (queue, tokenize,
	// media, prefill, sync, first_decode, load, ...); absent names were
	// neither reported nor inferred. EngineInferred names those the proxy
	// inferred (engine_report_inferred), in the record's order.
	Engine         map[string]time.Duration
	EngineInferred []string
	EngineReport   string
	Unsplit        bool
	// Inconsistent: the engine's durations did not fit the upstream window
	// the proxy timed on its own clock (engine_report_inconsistent).
	Inconsistent bool
	TokensOut    int
	// Buffering lists buffering signs when the record carries them
	// ("burst", "late_first_token", ...).
	Buffering []string

	// What a replay of a least_ttft pool's routing reads (bench/replay).
	// Time is when the proxy received the request; Upstream the one that
	// served it, chosen by Policy; Stream says the client asked for an
	// event stream.
	Time     time.Time
	Upstream string
	Policy   string
	Stream   bool
	// TokensIn is the engine's count of the prompt's tokens (0: not
	// reported); CachedTokens those it served from its prefix cache, when
	// CachedReported.
	TokensIn       int
	CachedTokens   int
	CachedReported bool
	// Predicted says Prediction holds the predicted stages, queue to
	// transport (predicted_stages_ms); Probe and Inputs are the choice's
	// (probe, prediction_inputs: Inputs.Set when present).
	Predicted  bool
	Prediction [stages.NumStages]time.Duration
	Probe      bool
	Inputs     record.PredictionInputs
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// ParseRecord decodes one record from its JSON form (record.Field). It
// requires a request_id and an end_reason; when ttft_ms is present,
// stages_ms must be too, name only known stages, and hold no negative
// value.
func ParseRecord(b []byte) (Record, error) {
	var j recordJSON
	if err := j.decode(b); err != nil {
		return Record{}, err
	}
	r := j.asIs
	if r.RequestID == "" || r.EndReason == "" {
		return Record{}, errors.New("not a request record (no request_id or end_reason)")
	}
	r.E2E = ms(j.e2e)
	if j.ttft != nil {
		if j.stages == nil {
			return Record{}, errors.New("ttft_ms without stages_ms")
		}
		var err error
		if r.Stages, err = parseStages(j.stages); err != nil {
			return Record{}, err
		}
		r.HasTTFT, r.TTFT = true, ms(*j.ttft)
	}
	if len(j.engine) > 0 {
		r.Engine = make(map[string]time.Duration, len(j.engine))
		for k, v := range j.engine {
			r.Engine[k] = ms(v)
		}
	}
	r.Buffering = parseBuffering(j.buffering)
	if j.predicted != nil {
		var err error
		if r.Prediction, err = parseStages(j.predicted); err != nil {
			return Record{}, fmt.Errorf("%s: %w", record.FieldPredictedStages, err)
		}
		r.Predicted = true
	}
	if j.cached != nil {
		r.CachedTokens, r.CachedReported = *j.cached, true
	}
	if in := j.inputs; in != nil {
		if in.PromptTokens < 0 || in.InFlight < 0 || in.BacklogMs < 0 || in.AheadMs < 0 || in.PrefixTokens < 0 {
			return Record{}, fmt.Errorf("%s: a negative count", record.FieldPredictionInputs)
		}
		r.Inputs = record.PredictionInputs{Set: true, PromptTokens: in.PromptTokens, InFlight: in.InFlight,
			Backlog: ms(in.BacklogMs), Ahead: ms(in.AheadMs), PrefixTokens: in.PrefixTokens, PrefixDistance: in.PrefixDistance}
		if in.Waiting != nil {
			r.Inputs.Waiting, r.Inputs.WaitingKnown = *in.Waiting, true
		}
	}
	return r, nil
}

// inputsJSON is prediction_inputs' JSON form.
type inputsJSON struct {
	PromptTokens   int     `json:"prompt_tokens"`
	InFlight       int64   `json:"in_flight"`
	Waiting        *int64  `json:"waiting"`
	BacklogMs      float64 `json:"backlog_ms"`
	AheadMs        float64 `json:"ahead_ms"`
	PrefixTokens   int     `json:"prefix_tokens"`
	PrefixDistance uint64  `json:"prefix_distance"`
}

// recordJSON is what ParseRecord reads of a record's JSON form: the fields
// a Record takes as they are, and the others still to convert.
type recordJSON struct {
	asIs           Record
	ttft           *float64
	e2e            float64
	stages, engine map[string]float64
	buffering      json.RawMessage
	predicted      map[string]float64
	cached         *int
	inputs         *inputsJSON
}

// decode reads j's fields from b, a JSON object.
func (j *recordJSON) decode(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	r := &j.asIs
	for _, f := range []struct {
		name record.Field
		into any
	}{
		{record.FieldRequestID, &r.RequestID},
		{record.FieldPath, &r.Path},
		{record.FieldModel, &r.Model},
		{record.FieldStatus, &r.Status},
		{record.FieldEndReason, &r.EndReason},
		{record.FieldEndDetail, &r.EndDetail},
		{record.FieldPhase, &r.Phase},
		{record.FieldTTFT, &j.ttft},
		{record.FieldE2E, &j.e2e},
		{record.FieldStages, &j.stages},
		{record.FieldUpstreamUnsplit, &r.Unsplit},
		{record.FieldStream, &r.Stream},
		{record.FieldEngineReportInconsistent, &r.Inconsistent},
		{record.FieldEngine, &j.engine},
		{record.FieldEngineReport, &r.EngineReport},
		{record.FieldEngineReportInferred, &r.EngineInferred},
		{record.FieldTokensOut, &r.TokensOut},
		{record.FieldBuffering, &j.buffering},
		{record.FieldTime, &r.Time},
		{record.FieldUpstream, &r.Upstream},
		{record.FieldPolicy, &r.Policy},
		{record.FieldTokensIn, &r.TokensIn},
		{record.FieldCachedTokens, &j.cached},
		{record.FieldPredictedStages, &j.predicted},
		{record.FieldProbe, &r.Probe},
		{record.FieldPredictionInputs, &j.inputs},
	} {
		if raw, ok := fields[f.name.String()]; ok {
			if err := json.Unmarshal(raw, f.into); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	return nil
}

// parseStages converts stages_ms: known stage names, no negative value.
func parseStages(msByName map[string]float64) ([stages.NumStages]time.Duration, error) {
	var out [stages.NumStages]time.Duration
	for name, v := range msByName {
		s, ok := stageByName(name)
		if !ok {
			return out, fmt.Errorf("unknown stage %q", name)
		}
		if v < 0 {
			return out, fmt.Errorf("stage %s negative", name)
		}
		out[s] = ms(v)
	}
	return out, nil
}

// parseBuffering accepts a list of names or a single name; anything else
// is ignored (the field is optional and not ours).
func parseBuffering(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return list
	}
	var one string
	if json.Unmarshal(raw, &one) == nil && one != "" {
		return strings.Split(one, ",")
	}
	return nil
}

func stageByName(name string) (stages.Stage, bool) {
	for s := range stages.NumStages {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// Joiner fetches the proxy's records from an admin listener.
type Joiner struct {
	// Admin is the admin listener's base URL, e.g. http://127.0.0.1:9464.
	Admin string
	// Client is used for the requests (nil: a client with a 2 s timeout).
	Client *http.Client
	// Wait bounds the retries for a record not yet emitted (default 2 s):
	// the proxy emits a record when the request is over, which may be a
	// moment after the client saw the end of the body.
	Wait time.Duration
}

// maxPending bounds how long Fetch waits for a record the proxy says is
// waiting for its engine's span: longer than any sensible
// --receive-otlp-wait.
const maxPending = 2 * time.Minute

// ErrNoRecord is returned by Fetch when the admin endpoint kept no record
// with the id (after retrying).
var ErrNoRecord = errors.New("no record kept for this request id")

func (j *Joiner) client() *http.Client {
	if j.Client != nil {
		return j.Client
	}
	return &http.Client{Timeout: 2 * time.Second}
}

// Check reports whether the admin endpoint answers /debug/requests.
func (j *Joiner) Check(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(j.Admin, "/")+"/debug/requests?limit=1", nil)
	if err != nil {
		return err
	}
	resp, err := j.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /debug/requests: status %d", resp.StatusCode)
	}
	return nil
}

// Fetch returns the record of request id, retrying on 404 with a short
// backoff until Wait has passed, and for as long as the proxy answers 202:
// the record waits for its engine's span (at most the proxy's
// --receive-otlp-wait, bounded here by maxPending).
func (j *Joiner) Fetch(ctx context.Context, id string) (Record, error) {
	wait := j.Wait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	deadline, pendingUntil := time.Now().Add(wait), time.Now().Add(maxPending)
	u := strings.TrimRight(j.Admin, "/") + "/debug/requests/" + url.PathEscape(id)
	backoff := 2 * time.Millisecond
	for {
		rec, status, err := j.get(ctx, u)
		if err == nil {
			return rec, nil
		}
		if status == http.StatusAccepted && time.Now().Before(pendingUntil) {
			deadline = time.Now().Add(wait) // written once its span joins, or its wait ends
		} else if status != http.StatusNotFound || time.Now().After(deadline) {
			if status == http.StatusNotFound {
				return Record{}, ErrNoRecord
			}
			return Record{}, err
		}
		select {
		case <-ctx.Done():
			return Record{}, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

func (j *Joiner) get(ctx context.Context, u string) (Record, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Record{}, 0, err
	}
	resp, err := j.client().Do(req)
	if err != nil {
		return Record{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Record{}, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return Record{}, resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
	}
	rec, err := ParseRecord(b)
	return rec, resp.StatusCode, err
}
