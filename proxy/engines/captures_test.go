package engines

import (
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// fms is a duration of f milliseconds, as an engine writes it in JSON.
func fms(f float64) time.Duration { return time.Duration(math.Round(f * 1e6)) }

// publicCaptures are the transcripts taken from engine output published in
// public sources (testdata/README.md names the source of each and what in
// it is not the capture's). want holds what the capture itself shows,
// written in the capture's own units: the reader must extract exactly
// that. detect is what Detect names from the transcript's headers alone.
var publicCaptures = []struct {
	file   string
	kind   string
	detect string
	ttfb   time.Duration
	want   replayed
}{
	// TGI /generate: x-queue-time 0, x-validation-time 0 (integer ms);
	// x-compute-time 0.111191439 (s), x-inference-time 110 and
	// x-time-per-token 36 are not split; x-prompt-tokens 7 (the body's
	// details have no input_length); 3 tokens, finish length.
	{"tgi/public_generate_whole.txt", KindTGI, KindTGI, 111 * ms, replayed{
		Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishLength,
		Usage: true, Prompt: 7, Output: 3, HeaderTiming: true,
		Engine: eng{stages.EngineQueue: 0, stages.EngineTokenize: 0}}},
	// TGI /generate_stream without "details": the last event has
	// generated_text and details null, no finish reason, no [DONE].
	{"tgi/public_generate_stream_no_details.txt", KindTGI, KindTGI, 40 * ms, replayed{
		Events: 3, Content: 3, FirstContent: 0, Done: true, Engine: eng{}}},

	// llama.cpp whole chat body: reasoning_content, usage 68/25 with
	// cached_tokens 60, timings prompt_ms 43.237, predicted_ms 238.74.
	{"llamacpp/public_chat_whole_reasoning.txt", KindLlamaCpp, KindLlamaCpp, 300 * ms, replayed{
		Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop,
		Usage: true, Prompt: 68, Output: 25, Cached: 60, Timing: true, Inferred: true, QueueInferred: true,
		Decode: fms(238.74),
		Engine: eng{stages.EnginePrefill: fms(43.237), stages.EngineQueue: ttfbQueue(300*ms, 0, fms(43.237))}}},
	// llama.cpp usage chunk of a stream: cache_n 236, prompt_ms 30.958,
	// predicted_n 35, predicted_ms 661.064.
	{"llamacpp/public_chat_stream_progress_usage.txt", KindLlamaCpp, KindLlamaCpp, 100 * ms, replayed{
		Events: 7, Content: 2, FirstContent: 2, Finish: endreason.FinishStop, Done: true,
		Usage: true, Prompt: 237, Output: 35, Cached: 236, UsageOnly: 1, Timing: true, Inferred: true, QueueInferred: true,
		Decode: fms(661.064),
		Engine: eng{stages.EnginePrefill: fms(30.958), stages.EngineQueue: ttfbQueue(100*ms, 2, fms(30.958))}}},

	// Ollama /api/chat, not streamed: load_duration 3106878899 ns (the
	// model loaded for this request: a load), prompt_eval_duration
	// 18088408 ns, eval_duration 94230297 ns, counts 19/14. The queue is
	// what they leave of the window (the replay knows no decode before the
	// first token: Report.End does).
	{"ollama/public_chat_whole.txt", KindOllama, KindGeneric, 3300 * ms, replayed{
		Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
		Usage: true, Prompt: 19, Output: 14, Timing: true, Inferred: true, QueueInferred: true, Decode: 94230297,
		Engine: eng{stages.EngineLoad: 3106878899, stages.EnginePrefill: 18088408,
			stages.EngineQueue: 3300*ms - 3106878899 - 18088408}}},
	// Ollama /api/chat stream: "done" before "done_reason", load_duration
	// 64549900 ns (warm: the handler's own work, recv), prompt_eval_count 12.
	{"ollama/public_chat_stream.txt", KindOllama, KindGeneric, 150 * ms, replayed{
		Events: 10, Content: 9, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
		Usage: true, Prompt: 12, Output: 124, Timing: true, Inferred: true, QueueInferred: true, Decode: 1339851200,
		Engine: eng{stages.EngineRecv: 64549900, stages.EnginePrefill: 61735200,
			stages.EngineQueue: 150*ms - 64549900 - 61735200}}},

	// vLLM 0.5 chat stream: the first chunk's delta is the role alone (no
	// content key), not content.
	{"vllm/public_chat_stream.txt", KindVLLM, KindGeneric, 40 * ms, replayed{
		Events: 8, Content: 5, FirstContent: 1, Finish: endreason.FinishStop, Done: true, Engine: eng{}}},
}

func TestPublicCaptures(t *testing.T) {
	for _, tc := range publicCaptures {
		t.Run(tc.file, func(t *testing.T) {
			tr := loadTranscript(t, filepath.Join("testdata", tc.file))
			if got := Detect(headerFunc(tr.header), nil, []byte(tr.header.Get("Server"))); got != tc.detect {
				t.Errorf("Detect on the headers = %q, want %q", got, tc.detect)
			}
			r, err := NewReader(tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			if got := replay(t, r, tr, tc.ttfb, ""); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("replay:\n got %s\nwant %s", fmtReplay(got), fmtReplay(tc.want))
			}
		})
	}
}
