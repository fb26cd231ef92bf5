package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// TestParseRecordReadsTheLogLines parses the log lines the exporters'
// golden files pin and checks every field ParseRecord keeps against the
// line itself.
func TestParseRecordReadsTheLogLines(t *testing.T) {
	paths, err := filepath.Glob("../exporters/testdata/log/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden log lines: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			line, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[record.Field]any
			if err := json.Unmarshal(line, &raw); err != nil {
				t.Fatal(err)
			}
			r, err := ParseRecord(line)
			if err != nil {
				t.Fatal(err)
			}
			millis := func(f record.Field) time.Duration {
				v, _ := raw[f].(float64)
				return ms(v)
			}
			var stagesMS map[string]any
			if m, ok := raw[record.FieldStages].(map[string]any); ok {
				stagesMS = m
			}
			strs := func(f record.Field) []string {
				var out []string
				if l, ok := raw[f].([]any); ok {
					for _, k := range l {
						out = append(out, k.(string))
					}
				}
				return out
			}
			for _, c := range []struct {
				field     record.Field
				got, want any
			}{
				{record.FieldRequestID, r.RequestID, raw[record.FieldRequestID]},
				{record.FieldPath, r.Path, raw[record.FieldPath]},
				{record.FieldModel, r.Model, raw[record.FieldModel]},
				{record.FieldStatus, float64(r.Status), raw[record.FieldStatus]},
				{record.FieldEndReason, r.EndReason, raw[record.FieldEndReason]},
				{record.FieldEndDetail, r.EndDetail, raw[record.FieldEndDetail]},
				{record.FieldPhase, r.Phase, stringOr(raw[record.FieldPhase])},
				{record.FieldTTFT, r.HasTTFT, raw[record.FieldTTFT] != nil},
				{record.FieldTTFT, r.TTFT, millis(record.FieldTTFT)},
				{record.FieldE2E, r.E2E, millis(record.FieldE2E)},
				{record.FieldStages, r.HasTTFT, len(stagesMS) == int(stages.NumStages)},
				{record.FieldUpstreamUnsplit, r.Unsplit, raw[record.FieldUpstreamUnsplit] == true},
				{record.FieldEngine, len(r.Engine), lenOf(raw[record.FieldEngine])},
				{record.FieldEngineReport, r.EngineReport, stringOr(raw[record.FieldEngineReport])},
				{record.FieldTokensOut, float64(r.TokensOut), raw[record.FieldTokensOut]},
				{record.FieldEngineReportInferred, r.EngineInferred, strs(record.FieldEngineReportInferred)},
				{record.FieldBuffering, r.Buffering, strs(record.FieldBuffering)},
				{record.FieldTime, r.Time.Format(time.RFC3339Nano), raw[record.FieldTime]},
				{record.FieldUpstream, r.Upstream, stringOr(raw[record.FieldUpstream])},
				{record.FieldPolicy, r.Policy, stringOr(raw[record.FieldPolicy])},
				{record.FieldTokensIn, r.TokensIn, int(number(raw[record.FieldTokensIn]))},
				{record.FieldCachedTokens, r.CachedReported, raw[record.FieldCachedTokens] != nil},
				{record.FieldCachedTokens, r.CachedTokens, int(number(raw[record.FieldCachedTokens]))},
				{record.FieldPredictedStages, r.Predicted, raw[record.FieldPredictedStages] != nil},
				{record.FieldPredictedStages, r.Prediction[stages.Prefill], msOf(raw[record.FieldPredictedStages], "prefill")},
				{record.FieldProbe, r.Probe, raw[record.FieldProbe] == true},
				{record.FieldStream, r.Stream, raw[record.FieldStream] == true},
				{record.FieldPredictionInputs, r.Inputs.Set, raw[record.FieldPredictionInputs] != nil},
				{record.FieldPredictionInputs, r.Inputs.PromptTokens, int(number(member(raw[record.FieldPredictionInputs], "prompt_tokens")))},
				{record.FieldPredictionInputs, r.Inputs.InFlight, int64(number(member(raw[record.FieldPredictionInputs], "in_flight")))},
				{record.FieldPredictionInputs, r.Inputs.WaitingKnown, member(raw[record.FieldPredictionInputs], "waiting") != nil},
				{record.FieldPredictionInputs, r.Inputs.Waiting, int64(number(member(raw[record.FieldPredictionInputs], "waiting")))},
				{record.FieldPredictionInputs, r.Inputs.Backlog, msOf(raw[record.FieldPredictionInputs], "backlog_ms")},
				{record.FieldPredictionInputs, r.Inputs.Ahead, msOf(raw[record.FieldPredictionInputs], "ahead_ms")},
				{record.FieldPredictionInputs, r.Inputs.PrefixTokens, int(number(member(raw[record.FieldPredictionInputs], "prefix_tokens")))},
				{record.FieldPredictionInputs, r.Inputs.PrefixDistance, uint64(number(member(raw[record.FieldPredictionInputs], "prefix_distance")))},
			} {
				if !reflect.DeepEqual(c.got, c.want) {
					t.Errorf("%s: parsed %v, the line has %v", c.field, c.got, c.want)
				}
			}
			for name, v := range stagesMS {
				s, _ := stageByName(name)
				if r.Stages[s] != ms(v.(float64)) {
					t.Errorf("stage %s: parsed %v, the line has %v ms", name, r.Stages[s], v)
				}
			}
		})
	}
}

// member is object v's member k (nil when v is not an object).
func member(v any, k string) any {
	m, _ := v.(map[string]any)
	return m[k]
}

// number is v as a JSON number, 0 when it is not one.
func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

// msOf is object v's member k, in milliseconds.
func msOf(v any, k string) time.Duration { return ms(number(member(v, k))) }

func stringOr(v any) string {
	s, _ := v.(string)
	return s
}

func lenOf(v any) int {
	m, _ := v.(map[string]any)
	return len(m)
}

func TestParseRecordRejects(t *testing.T) {
	tests := []struct {
		name, line, err string
	}{
		{"not JSON", `request a`, "invalid character"},
		{"not an object", `["request_id"]`, "cannot unmarshal array"},
		{"no request id", `{"end_reason":"stop"}`, "not a request record"},
		{"no end reason", `{"request_id":"a"}`, "not a request record"},
		{"a field of the wrong type", `{"request_id":"a","end_reason":"stop","status":"200"}`, "status:"},
		{"ttft without stages", `{"request_id":"a","end_reason":"stop","ttft_ms":3}`, "ttft_ms without stages_ms"},
		{"unknown stage", `{"request_id":"a","end_reason":"stop","ttft_ms":3,"stages_ms":{"bogus":3}}`, `unknown stage "bogus"`},
		{"negative stage", `{"request_id":"a","end_reason":"stop","ttft_ms":3,"stages_ms":{"queue":-1}}`, "stage queue negative"},
		{"unknown predicted stage", `{"request_id":"a","end_reason":"stop","predicted_stages_ms":{"bogus":3}}`, `predicted_stages_ms: unknown stage "bogus"`},
		{"negative inputs", `{"request_id":"a","end_reason":"stop","prediction_inputs":{"prompt_tokens":-1}}`, "prediction_inputs: a negative count"},
		{"inputs of the wrong type", `{"request_id":"a","end_reason":"stop","prediction_inputs":[1]}`, "prediction_inputs:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.line))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want one saying %q", err, tt.err)
			}
			if !reflect.DeepEqual(r, Record{}) {
				t.Errorf("record %+v, want none", r)
			}
		})
	}
}

// TestFetchWaitsForPendingRecords: a record the proxy says is waiting for
// its engine's span (202) is asked for again, past Wait, until it comes; a
// 404 still gives up after Wait.
func TestFetchWaitsForPendingRecords(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/gone"):
			http.NotFound(w, r)
		case asked.Add(1) <= 5:
			w.WriteHeader(http.StatusAccepted)
		default:
			io.WriteString(w, `{"msg":"request","request_id":"late","end_reason":"stop","e2e_ms":9}`)
		}
	}))
	defer srv.Close()
	j := &Joiner{Admin: srv.URL, Wait: time.Nanosecond}
	rec, err := j.Fetch(context.Background(), "late")
	if err != nil || rec.RequestID != "late" || asked.Load() != 6 {
		t.Errorf("pending record: %+v, %v after %d asks; want it after 6", rec, err, asked.Load())
	}
	if _, err := j.Fetch(context.Background(), "gone"); !errors.Is(err, ErrNoRecord) {
		t.Errorf("missing record: %v, want ErrNoRecord", err)
	}
}
