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
	// media, prefill, sync, first_decode); absent names were not reported.
	Engine       map[string]time.Duration
	EngineReport string
	Unsplit      bool
	TokensOut    int
	// Buffering lists buffering signs when the record carries them
	// ("burst", "late_first_token", ...).
	Buffering []string
}

// recordJSON is the wire form shared by the log line and the admin endpoint.
type recordJSON struct {
	Msg          string             `json:"msg"`
	RequestID    string             `json:"request_id"`
	Path         string             `json:"path"`
	Model        string             `json:"model"`
	Status       int                `json:"status"`
	EndReason    string             `json:"end_reason"`
	EndDetail    string             `json:"end_detail"`
	Phase        string             `json:"phase"`
	TTFT         *float64           `json:"ttft_ms"`
	E2E          float64            `json:"e2e_ms"`
	Stages       map[string]float64 `json:"stages_ms"`
	Engine       map[string]float64 `json:"engine_ms"`
	EngineReport string             `json:"engine_report"`
	Unsplit      bool               `json:"upstream_unsplit"`
	TokensOut    int                `json:"tokens_out"`
	Buffering    json.RawMessage    `json:"buffering"`
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// ParseRecord decodes one record from its JSON form. It requires a
// request_id and an end_reason; when ttft_ms is present, stages_ms must be
// too, name only known stages, and hold no negative value.
func ParseRecord(b []byte) (Record, error) {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Record{}, err
	}
	if j.RequestID == "" || j.EndReason == "" {
		return Record{}, errors.New("not a request record (no request_id or end_reason)")
	}
	r := Record{
		RequestID: j.RequestID, Path: j.Path, Model: j.Model, Status: j.Status,
		EndReason: j.EndReason, EndDetail: j.EndDetail, Phase: j.Phase,
		E2E: ms(j.E2E), EngineReport: j.EngineReport, Unsplit: j.Unsplit, TokensOut: j.TokensOut,
	}
	if j.TTFT != nil {
		if j.Stages == nil {
			return Record{}, errors.New("ttft_ms without stages_ms")
		}
		r.HasTTFT, r.TTFT = true, ms(*j.TTFT)
		for name, v := range j.Stages {
			s, ok := stageByName(name)
			if !ok {
				return Record{}, fmt.Errorf("unknown stage %q", name)
			}
			if v < 0 {
				return Record{}, fmt.Errorf("stage %s negative", name)
			}
			r.Stages[s] = ms(v)
		}
	}
	if len(j.Engine) > 0 {
		r.Engine = make(map[string]time.Duration, len(j.Engine))
		for k, v := range j.Engine {
			r.Engine[k] = ms(v)
		}
	}
	r.Buffering = parseBuffering(j.Buffering)
	return r, nil
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
// backoff until Wait has passed.
func (j *Joiner) Fetch(ctx context.Context, id string) (Record, error) {
	wait := j.Wait
	if wait <= 0 {
		wait = 2 * time.Second
	}
	deadline := time.Now().Add(wait)
	u := strings.TrimRight(j.Admin, "/") + "/debug/requests/" + url.PathEscape(id)
	backoff := 2 * time.Millisecond
	for {
		rec, status, err := j.get(ctx, u)
		if err == nil {
			return rec, nil
		}
		if status != http.StatusNotFound || time.Now().After(deadline) {
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
