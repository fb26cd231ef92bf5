package signals

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/stages"
)

// BenchmarkInspect measures one event's inspection, per chunk shape. The
// content chunk is the hot path: every generated token goes through it.
func BenchmarkInspect(b *testing.B) {
	cases := []struct {
		name string
		data string
		want Event
	}{
		{"openai_content", openaiContent, Event{Content: true}},
		{"vllm_role", vllmRole, Event{}},
		{"vllm_usage", vllmUsage, Event{Usage: true, PromptTokens: 27, CompletionTokens: 128}},
		{"llamacpp_final", llamacppFinal, Event{Finish: endreason.FinishStop, Usage: true, PromptTokens: 9, CompletionTokens: 16}},
		{"tool_call_args", toolCallArgs, Event{Content: true}},
		{"done", "[DONE]", Event{Done: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.data)
			var o OpenAI
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if ev := o.Inspect(data); ev != c.want {
					b.Fatalf("Inspect = %+v, want %+v", ev, c.want)
				}
			}
		})
	}
	b.Run("parallel_content", func(b *testing.B) {
		data := []byte(openaiContent)
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var o OpenAI // one reader per request goroutine
			for pb.Next() {
				if !o.Inspect(data).Content {
					b.Error("content chunk not seen as content")
					return
				}
			}
		})
	})
}

func BenchmarkParseServerTiming(b *testing.B) {
	v := []byte(`queue;dur=1.25, tokenize;dur=0.5, media;dur=0, prefill;desc="chunked, 4 ranks";dur=30.125, sync;dur=2, decode1;dur=7.5`)
	var tl stages.Timeline
	tl.Start(func() int64 { return 0 }, time.Time{})
	b.SetBytes(int64(len(v)))
	b.ReportAllocs()
	for b.Loop() {
		if n := ParseServerTiming(v, &tl); n != 6 {
			b.Fatalf("recorded %d, want 6", n)
		}
	}
}
