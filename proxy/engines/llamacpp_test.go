package engines

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// TestLlamaCppPrefillFromFirstTimings: the prefill is read from the first
// chunk whose timings count a generated token, wherever the engine put it
// (every chunk with timings_per_token, the final chunk otherwise); a
// prompt-progress chunk's running prompt_ms before it does not stay, and
// nothing after it replaces it. The decode time is the latest chunk's.
func TestLlamaCppPrefillFromFirstTimings(t *testing.T) {
	const (
		progress = `{"choices":[],"prompt_progress":{"total":237,"cache":0,"processed":128,"time_ms":181},"timings":{"prompt_n":128,"prompt_ms":181.0,"predicted_n":0,"predicted_ms":0}}`
		first    = `{"choices":[{"index":0,"delta":{"reasoning_content":"a"}}],"timings":{"prompt_n":237,"prompt_ms":250.5,"predicted_n":1,"predicted_ms":0.5}}`
		later    = `{"choices":[{"index":0,"delta":{"content":"b"}}],"timings":{"prompt_n":237,"prompt_ms":999.0,"predicted_n":9,"predicted_ms":120.25}}`
		final    = `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"prompt_n":237,"prompt_ms":250.5,"predicted_n":9,"predicted_ms":121.0}}`
		noTiming = `{"choices":[{"index":0,"delta":{"content":"c"}}]}`
	)
	tests := []struct {
		name       string
		events     []string
		prefill    time.Duration
		lastDecode time.Duration
	}{
		{"final chunk only", []string{noTiming, noTiming, final}, 250500 * us, 121 * ms},
		{"every chunk: the first wins", []string{first, later, final}, 250500 * us, 121 * ms},
		{"progress then tokens", []string{progress, first, later}, 250500 * us, 120250 * us},
		{"progress only", []string{progress}, 181 * ms, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := new(LlamaCppReader)
			for range 2 { // the same reader again after Reset: nothing carried over
				r.Reset()
				tl := newTL()
				var decode time.Duration
				for _, e := range tc.events {
					if ev := r.Event([]byte(e), tl); ev.Decode != 0 {
						decode = ev.Decode
					}
				}
				if got, ok := tl.Engine(stages.EnginePrefill); !ok || got != tc.prefill {
					t.Errorf("prefill %v (reported %v), want %v", got, ok, tc.prefill)
				}
				if decode != tc.lastDecode {
					t.Errorf("decode %v, want %v", decode, tc.lastDecode)
				}
			}
		})
	}
}
