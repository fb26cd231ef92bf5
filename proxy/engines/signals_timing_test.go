package engines

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

// BenchmarkReaderEvent measures Reader.Event per reader, per typical event
// (ns/event): the content event is the hot path.
func BenchmarkReaderEvent(b *testing.B) {
	for _, c := range readerEvents {
		b.Run(c.kind+"_"+c.name, func(b *testing.B) {
			r, _ := NewReader(c.kind)
			var tl stages.Timeline
			tl.Start(func() int64 { return 0 }, time.Time{})
			data := []byte(c.data)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r.Event(data, &tl)
			}
		})
	}
}

// BenchmarkLineScanner measures splitting Ollama NDJSON lines (ns/line).
func BenchmarkLineScanner(b *testing.B) {
	line := []byte(ollamaContent + "\n")
	var stream []byte
	for range 64 {
		stream = append(stream, line...)
	}
	sc := NewLineScanner(&loopReader{data: stream}, 0)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sc.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnsureIncludeUsage measures the once-per-request rewrite of a
// typical chat request.
func BenchmarkEnsureIncludeUsage(b *testing.B) {
	body := []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"max_tokens":256,"temperature":0.7,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Explain the difference between prefill and decode in two sentences."}]}`)
	dst := make([]byte, 0, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, added, _ := EnsureIncludeUsage(body, dst[:0]); !added {
			b.Fatal("not added")
		}
	}
}
