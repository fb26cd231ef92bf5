package engines

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

// transcript is a recorded upstream response: testdata/<kind>/<name>.txt
// holds the status line, the headers, a blank line, and the body exactly as
// the engine sends it (see testdata/README.md for the source of each shape).
type transcript struct {
	header http.Header
	body   []byte
}

func loadTranscript(t testing.TB, path string) transcript {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := bytes.Cut(b, []byte("\n\n"))
	if !ok {
		t.Fatalf("%s: no blank line after the headers", path)
	}
	tp := textproto.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(head), strings.NewReader("\n\n"))))
	if _, err := tp.ReadLine(); err != nil { // status line
		t.Fatal(err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%s: headers: %v", path, err)
	}
	return transcript{header: http.Header(h), body: body}
}

func headerFunc(h http.Header) func(string) []byte {
	return func(name string) []byte {
		if v := h.Get(name); v != "" {
			return []byte(v)
		}
		return nil
	}
}

// replayed is what a replay saw, in the relay's terms.
type replayed struct {
	Events, Content int
	Reasoning       int // content events carrying reasoning only
	FirstContent    int // index of the first content event, -1 if none
	Finish          endreason.Finish
	Done, Error     bool
	Malformed       bool
	Usage           bool
	Prompt, Output  int
	Cached          int
	UsageOnly       int  // usage-only chunks seen
	Timing          bool // some event carried durations
	Inferred        bool // some event said the queue is to be inferred
	HeaderTiming    bool // Header recorded durations (headers or trailers)
	CommentTiming   bool // the in-band comment did (the relay's part, emulated)
	QueueInferred   bool // InferQueue recorded the queue at done (no slot wait)
	Decode          time.Duration
	Types           string // Anthropic event types, space-separated
	Engine          map[stages.EngineDur]time.Duration
}

const (
	sentAt   = time.Millisecond       // the request went upstream
	eventGap = 2 * time.Millisecond   // between two events
	hdrDelay = 500 * time.Microsecond // headers after the request
)

// replay feeds tr through r the way the relay does, on a fake clock: the
// headers arrive hdrDelay after the request was sent, the first event (or
// the whole body) ttfb after it, the next ones eventGap apart. FirstToken
// and LastToken are marked on content, as exchange.observe does; at the end
// the trailer (if any) is read and InferQueue called.
func replay(t testing.TB, r Reader, tr transcript, ttfb time.Duration, trailer string) replayed {
	t.Helper()
	var now time.Duration
	var tl stages.Timeline
	tl.Start(func() int64 { return int64(now) }, time.Time{})
	now = sentAt
	tl.Mark(stages.UpstreamSent)
	now += hdrDelay
	tl.Mark(stages.UpstreamHeaders)
	r.Reset()
	got := replayed{FirstContent: -1, Engine: map[stages.EngineDur]time.Duration{}}
	got.HeaderTiming = r.Header(headerFunc(tr.header), &tl)
	now = sentAt + ttfb
	var types []string
	inspect := func(data []byte) {
		ev := r.Event(data, &tl)
		if ev.Content {
			tl.Mark(stages.FirstToken)
			tl.MarkAt(stages.LastToken, now)
			if got.FirstContent < 0 {
				got.FirstContent = got.Events
			}
			got.Content++
		}
		if ev.Reasoning {
			got.Reasoning++
		}
		got.Events++
		if ev.Finish != endreason.FinishNone {
			got.Finish = ev.Finish
		}
		got.Done = got.Done || ev.Done
		got.Error = got.Error || ev.Error
		got.Malformed = got.Malformed || ev.Malformed
		if ev.Usage {
			got.Usage, got.Prompt, got.Output, got.Cached = true, ev.PromptTokens, ev.CompletionTokens, ev.CachedTokens
		} else if ev.CachedTokens != 0 {
			got.Cached = ev.CachedTokens
		}
		if ev.UsageOnly {
			got.UsageOnly++
		}
		got.Timing = got.Timing || ev.Timing
		got.Inferred = got.Inferred || ev.Inferred
		if ev.Decode != 0 {
			got.Decode = ev.Decode
		}
		if ev.EventType != EventNone {
			types = append(types, ev.EventType.String())
		}
		now += eventGap
	}
	ct := tr.header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		sc := sse.NewScanner(bytes.NewReader(tr.body), 0)
		for {
			ev, err := sc.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("sse: %v", err)
			}
			if ev.Comments > 0 && bytes.HasPrefix(ev.Comment, ServerTimingPrefix) {
				got.CommentTiming = ParseServerTiming(ev.Comment[len(ServerTimingPrefix):], &tl) > 0 || got.CommentTiming
			}
			if ev.HasData {
				inspect(ev.Data)
			}
		}
	case strings.HasPrefix(ct, "application/x-ndjson"):
		sc := NewLineScanner(bytes.NewReader(tr.body), 0)
		for {
			_, line, err := sc.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("ndjson: %v", err)
			}
			if len(line) > 0 {
				inspect(line)
			}
		}
	default:
		inspect(tr.body)
	}
	if trailer != "" {
		th := http.Header{"Server-Timing": {trailer}}
		got.HeaderTiming = r.Header(headerFunc(th), &tl) || got.HeaderTiming
	}
	got.QueueInferred = InferQueue(&tl, 0)
	for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
		if v, ok := tl.Engine(d); ok {
			got.Engine[d] = v
		}
	}
	got.Types = strings.Join(types, " ")
	return got
}

type eng = map[stages.EngineDur]time.Duration

const (
	ms = time.Millisecond
	us = time.Microsecond
)

// secs is a difference of two float seconds as the reader computes it (in
// float64, not in exact constant arithmetic).
func secs(a, b float64) time.Duration { return time.Duration(math.Round((a - b) * 1e9)) }

// ttfbQueue is the queue InferQueue infers when the first content event is
// the k-th event (0-based): FirstToken − UpstreamSent − prefill.
func ttfbQueue(ttfb time.Duration, k int, prefill time.Duration) time.Duration {
	return ttfb + time.Duration(k)*eventGap - prefill
}

func TestReplayTranscripts(t *testing.T) {
	const (
		Q  = stages.EngineQueue
		TK = stages.EngineTokenize
		MD = stages.EngineMedia
		PF = stages.EnginePrefill
		SY = stages.EngineSync
		D1 = stages.EngineFirstDecode
	)
	tests := []struct {
		file    string
		kind    string
		ttfb    time.Duration
		trailer string
		want    replayed
	}{
		// Reference engine: in-band comment (the relay's part), header, trailer.
		{"reference/chat_stream_comment.txt", KindReference, 20 * ms, "", replayed{
			Events: 5, Content: 2, FirstContent: 1, Finish: endreason.FinishLength, Done: true, CommentTiming: true,
			Engine: eng{Q: 1234 * us, TK: 500 * us, MD: 0, PF: 12300 * us, SY: 800 * us, D1: 2100 * us}}},
		{"reference/chat_stream_header.txt", KindReference, 20 * ms, "", replayed{
			Events: 4, Content: 1, FirstContent: 1, Finish: endreason.FinishStop, Done: true, HeaderTiming: true, CommentTiming: true,
			Engine: eng{Q: 3500 * us, TK: 250 * us, MD: 0, PF: 20 * ms, SY: 0, D1: 1500 * us}}},
		{"reference/chat_whole.txt", KindReference, 50 * ms, "queue;dur=2, prefill;dur=30.5, decode1;dur=1", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop, Usage: true, Prompt: 12, Output: 4, HeaderTiming: true,
			Engine: eng{Q: 2 * ms, PF: 30500 * us, D1: ms}}},

		// vLLM: metrics on the usage chunk, ms.
		{"vllm/chat_stream_metrics.txt", KindVLLM, 60 * ms, "", replayed{
			Events: 7, Content: 3, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 27, Output: 4, Cached: 16, UsageOnly: 1, Timing: true, Decode: 61750 * us,
			Engine: eng{Q: 4250 * us, PF: 37500 * us}}},
		{"vllm/chat_stream_queue_null.txt", KindVLLM, 40 * ms, "", replayed{
			Events: 5, Content: 1, FirstContent: 1, Finish: endreason.FinishLength, Done: true,
			Usage: true, Prompt: 9, Output: 1, UsageOnly: 1, Timing: true, Inferred: true, QueueInferred: true,
			Engine: eng{PF: 12125 * us, Q: ttfbQueue(40*ms, 1, 12125*us)}}},
		{"vllm/chat_stream_no_metrics.txt", KindVLLM, 40 * ms, "", replayed{
			Events: 5, Content: 1, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 5, Output: 1, UsageOnly: 1, Engine: eng{}}},
		{"vllm/chat_stream_n2_metrics_null.txt", KindVLLM, 40 * ms, "", replayed{
			Events: 5, Content: 1, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 5, Output: 2, UsageOnly: 1, Engine: eng{}}},
		{"vllm/chat_whole_metrics.txt", KindVLLM, 45 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop,
			Usage: true, Prompt: 14, Output: 3, Timing: true, Decode: 15500 * us,
			Engine: eng{Q: 500 * us, PF: 22 * ms}}},

		// llama.cpp: timings, ms; the queue inferred at done.
		{"llamacpp/chat_stream.txt", KindLlamaCpp, 30 * ms, "", replayed{
			Events: 6, Content: 3, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 12, Output: 3, Cached: 3, Timing: true, Inferred: true, QueueInferred: true, Decode: 41500 * us,
			Engine: eng{PF: 12345 * us, Q: ttfbQueue(30*ms, 1, 12345*us)}}},
		{"llamacpp/chat_stream_include_usage.txt", KindLlamaCpp, 300 * ms, "", replayed{
			Events: 6, Content: 2, FirstContent: 1, Finish: endreason.FinishLength, Done: true,
			Usage: true, Prompt: 20, Output: 2, UsageOnly: 1, Timing: true, Inferred: true, QueueInferred: true, Decode: 30 * ms,
			Engine: eng{PF: 250 * ms, Q: 52 * ms}}},
		{"llamacpp/chat_stream_timings_per_token.txt", KindLlamaCpp, 10 * ms, "", replayed{
			Events: 5, Content: 2, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 5, Output: 2, Timing: true, Inferred: true, QueueInferred: true, Decode: 11 * ms,
			Engine: eng{PF: 8 * ms, Q: 4 * ms}}},
		// Speculative decoding: draft_n/draft_n_accepted appear once a draft
		// ran; chunks of one accepted draft share their timings.
		{"llamacpp/chat_stream_timings_per_token_draft.txt", KindLlamaCpp, 120 * ms, "", replayed{
			Events: 7, Content: 4, FirstContent: 1, Finish: endreason.FinishLength, Done: true,
			Usage: true, Prompt: 14, Output: 4, Timing: true, Inferred: true, QueueInferred: true, Decode: 61500 * us,
			Engine: eng{PF: 96250 * us, Q: ttfbQueue(120*ms, 1, 96250*us)}}},
		{"llamacpp/completion_native.txt", KindLlamaCpp, 8 * ms, "", replayed{
			Events: 3, Content: 2, FirstContent: 0, Finish: endreason.FinishStop,
			Usage: true, Prompt: 6, Output: 2, Timing: true, Inferred: true, QueueInferred: true, Decode: 20250 * us,
			Engine: eng{PF: 5500 * us, Q: 2500 * us}}},
		// Captured (see testdata/README.md): reasoning deltas of a model
		// drafting speculatively, timings (with draft_n) on every chunk;
		// the end is added.
		{"llamacpp/chat_stream_reasoning_speculative.txt", KindLlamaCpp, 300 * ms, "", replayed{
			Events: 12, Content: 10, Reasoning: 10, FirstContent: 0, Finish: endreason.FinishLength, Done: true,
			Timing: true, Inferred: true, QueueInferred: true,
			Decode: 1503987 * us, Cached: 7, Engine: eng{PF: 251510 * us, Q: 300*ms - 251510*us}}},
		{"llamacpp/chat_whole.txt", KindLlamaCpp, 40 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop,
			Usage: true, Prompt: 10, Output: 2, Cached: 10, Timing: true, Inferred: true, QueueInferred: true, Decode: 25 * ms,
			Engine: eng{PF: 875 * us, Q: 40*ms - 875*us}}},

		// Ollama: NDJSON, nanoseconds.
		{"ollama/chat_stream.txt", KindOllama, 1500 * ms, "", replayed{
			Events: 6, Content: 5, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 26, Output: 5, Timing: true, Inferred: true, QueueInferred: true, Decode: 240500 * us,
			Engine: eng{stages.EngineLoad: 1021167458, PF: 312 * ms, Q: 1500*ms - 1021167458 - 312*ms}}},
		{"ollama/generate_stream.txt", KindOllama, 60 * ms, "", replayed{
			Events: 4, Content: 3, FirstContent: 0, Finish: endreason.FinishLength, Done: true,
			Usage: true, Prompt: 11, Output: 3, Timing: true, Inferred: true, QueueInferred: true, Decode: 40125 * us,
			Engine: eng{stages.EngineRecv: 8791, PF: 43210 * us, Q: 60*ms - 8791 - 43210*us}}},
		{"ollama/chat_thinking_tools_no_load.txt", KindOllama, 200 * ms, "", replayed{
			Events: 3, Content: 2, Reasoning: 1, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 40, Output: 12, Timing: true, Inferred: true, QueueInferred: true, Decode: 300 * ms,
			Engine: eng{PF: 120 * ms, Q: 80 * ms}}},
		{"ollama/chat_error_midstream.txt", KindOllama, 60 * ms, "", replayed{
			Events: 3, Content: 2, FirstContent: 0, Error: true, Engine: eng{}}},
		{"ollama/chat_whole.txt", KindOllama, 4900 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 26, Output: 7, Timing: true, Inferred: true, QueueInferred: true, Decode: 4535599 * us,
			Engine: eng{stages.EngineRecv: 1334875, PF: 342546 * us, Q: 4900*ms - 1334875 - 342546*us}}},

		// SGLang native /generate: meta_info, seconds; cumulative text.
		{"sglang/generate_stream.txt", KindSGLang, 70 * ms, "", replayed{
			Events: 5, Content: 3, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 7, Output: 3, Cached: 2, Timing: true,
			Engine: eng{Q: 12500 * us, PF: secs(1718000003.2875, 1718000003.25)}}},
		{"sglang/generate_stream_zero_timing.txt", KindSGLang, 70 * ms, "", replayed{
			Events: 4, Content: 2, FirstContent: 0, Finish: endreason.FinishLength, Done: true,
			Usage: true, Prompt: 7, Output: 2, Cached: 2, Engine: eng{}}},
		{"sglang/generate_stream_prefill_only.txt", KindSGLang, 100 * ms, "", replayed{
			Events: 3, Content: 1, FirstContent: 0, Finish: endreason.FinishAbort, Done: true,
			Usage: true, Prompt: 7, Output: 1, Cached: 2, Timing: true, Inferred: true, QueueInferred: true,
			Engine: eng{PF: 62500 * us, Q: 37500 * us}}},
		{"sglang/generate_stream_incremental.txt", KindSGLang, 70 * ms, "", replayed{
			Events: 5, Content: 3, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 7, Output: 3, Cached: 2, Timing: true,
			Engine: eng{Q: 12500 * us, PF: secs(1718000003.2875, 1718000003.25)}}},
		{"sglang/generate_whole.txt", KindSGLang, 90 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishStop,
			Usage: true, Prompt: 7, Output: 5, Cached: 2, Timing: true,
			Engine: eng{Q: 12500 * us, PF: secs(1718000003.2875, 1718000003.25)}}},

		// TGI: headers on the non-streamed response only, ms.
		{"tgi/generate_whole.txt", KindTGI, 420 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishLength,
			Usage: true, Prompt: 6, Output: 20, HeaderTiming: true, Engine: eng{Q: 37 * ms, TK: 2 * ms}}},
		{"tgi/generate_stream.txt", KindTGI, 50 * ms, "", replayed{
			Events: 3, Content: 2, FirstContent: 0, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 6, Output: 3, Engine: eng{}}},
		{"tgi/chat_stream_stop_sequence.txt", KindTGI, 50 * ms, "", replayed{
			Events: 4, Content: 2, FirstContent: 0, Finish: endreason.FinishStop, Done: true, Engine: eng{}}},
		{"tgi/generate_stream_error.txt", KindTGI, 50 * ms, "", replayed{
			Events: 2, Content: 1, FirstContent: 0, Error: true, Engine: eng{}}},

		// Anthropic Messages.
		{"anthropic/messages_stream.txt", KindAnthropic, 300 * ms, "", replayed{
			Events: 8, Content: 2, FirstContent: 3, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 125, Output: 15, Cached: 100, Engine: eng{},
			Types: "message_start content_block_start ping content_block_delta content_block_delta content_block_stop message_delta message_stop"}},
		{"anthropic/tool_use_stream.txt", KindAnthropic, 300 * ms, "", replayed{
			Events: 11, Content: 3, Reasoning: 1, FirstContent: 2, Finish: endreason.FinishToolCalls, Done: true,
			Usage: true, Prompt: 472, Output: 89, Engine: eng{},
			Types: "message_start content_block_start content_block_delta content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"}},
		{"anthropic/error_stream.txt", KindAnthropic, 300 * ms, "", replayed{
			Events: 3, FirstContent: -1, Error: true, Engine: eng{}, Types: "message_start ping error"}},
		{"anthropic/refusal_stream.txt", KindAnthropic, 300 * ms, "", replayed{
			Events: 6, FirstContent: -1, Finish: endreason.FinishContentFilter, Done: true,
			Usage: true, Prompt: 10, Output: 0, Engine: eng{},
			Types: "message_start content_block_start content_block_stop message_delta other message_stop"}},
		{"anthropic/messages_whole.txt", KindAnthropic, 900 * ms, "", replayed{
			Events: 1, Content: 1, FirstContent: 0, Finish: endreason.FinishLength,
			Usage: true, Prompt: 2095, Output: 503, Engine: eng{}, Types: "message"}},

		// Generic: OpenAI fields only.
		{"generic/openai_stream.txt", KindGeneric, 200 * ms, "", replayed{
			Events: 5, Content: 1, FirstContent: 1, Finish: endreason.FinishStop, Done: true,
			Usage: true, Prompt: 12, Output: 1, UsageOnly: 1, Engine: eng{}}},
	}
	seen := map[string]bool{}
	for _, pc := range publicCaptures {
		seen[pc.file] = true
	}
	for _, tc := range tests {
		seen[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			r, err := NewReader(tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind() != tc.kind {
				t.Fatalf("Kind() = %q, want %q", r.Kind(), tc.kind)
			}
			tr := loadTranscript(t, filepath.Join("testdata", tc.file))
			got := replay(t, r, tr, tc.ttfb, tc.trailer)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("replay %s:\n got %s\nwant %s", tc.file, fmtReplay(got), fmtReplay(tc.want))
			}
			// The same reader again, after Reset: nothing carried over.
			if again := replay(t, r, tr, tc.ttfb, tc.trailer); !reflect.DeepEqual(again, got) {
				t.Errorf("second replay on the same reader differs:\n got %s\nwant %s", fmtReplay(again), fmtReplay(got))
			}
		})
	}
	// Every transcript is replayed.
	files, _ := filepath.Glob("testdata/*/*.txt")
	for _, f := range files {
		rel, _ := filepath.Rel("testdata", f)
		if !seen[filepath.ToSlash(rel)] {
			t.Errorf("transcript %s is not replayed by any test", rel)
		}
	}
}

func fmtReplay(r replayed) string {
	s := fmt.Sprintf("%+v", r)
	var parts []string
	for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
		if v, ok := r.Engine[d]; ok {
			parts = append(parts, fmt.Sprintf("%v=%v(%dns)", d, v, int64(v)))
		}
	}
	return s + " engine[" + strings.Join(parts, " ") + "]"
}

// TestReplayNoStageNegative: for every transcript and every reader kind
// (the wrong one too), what gets recorded is within a day, and the inferred
// queue is never negative.
func TestReplayAnyKind(t *testing.T) {
	files, _ := filepath.Glob("testdata/*/*.txt")
	for _, f := range files {
		tr := loadTranscript(t, f)
		for _, k := range Kinds {
			r, _ := NewReader(k)
			got := replay(t, r, tr, 10*ms, "")
			for d, v := range got.Engine {
				if v < -maxDur || v > maxDur {
					t.Errorf("%s via %s: %v = %v", f, k, d, v)
				}
			}
			if q, ok := got.Engine[stages.EngineQueue]; ok && got.QueueInferred && q <= 0 {
				t.Errorf("%s via %s: inferred queue %v", f, k, q)
			}
			if got.Malformed {
				t.Errorf("%s via %s: malformed event", f, k)
			}
		}
	}
}

// TestGenericRecognisesEngines: read with the generic reader (an upstream
// not identified yet), a transcript of an engine whose response says who
// sent it records what that engine's own reader records, and names the
// engine; every other transcript names none and records nothing.
func TestGenericRecognisesEngines(t *testing.T) {
	self := map[string]bool{KindLlamaCpp: true, KindVLLM: true, KindOllama: true}
	files, _ := filepath.Glob("testdata/*/*.txt")
	for _, f := range files {
		kind := filepath.Base(filepath.Dir(f))
		t.Run(strings.TrimPrefix(f, "testdata/"), func(t *testing.T) {
			tr := loadTranscript(t, f)
			var generic GenericReader
			got := replay(t, &generic, tr, 10*ms, "")
			if !self[kind] {
				if generic.Recognised() != "" || got.Timing {
					t.Errorf("recognised %q, timing %v; want neither", generic.Recognised(), got.Timing)
				}
				return
			}
			own, _ := NewReader(kind)
			want := replay(t, own, tr, 10*ms, "")
			if want.Timing && generic.Recognised() != kind {
				t.Errorf("recognised %q, want %q", generic.Recognised(), kind)
			}
			if got.Timing != want.Timing || got.Inferred != want.Inferred || got.QueueInferred != want.QueueInferred ||
				!reflect.DeepEqual(got.Engine, want.Engine) || got.Decode != want.Decode {
				t.Errorf("read as generic: timing %v, inferred %v/%v, engine %v, decode %v;\n%s's reader: %v, %v/%v, %v, %v",
					got.Timing, got.Inferred, got.QueueInferred, got.Engine, got.Decode,
					kind, want.Timing, want.Inferred, want.QueueInferred, want.Engine, want.Decode)
			}
		})
	}
}
