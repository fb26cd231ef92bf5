//go:build !race

package engines

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// TestInspectAllocs: once warm, reading an event allocates nothing (the
// package promise), for every shape on the hot path, invalid JSON included.
func TestInspectAllocs(t *testing.T) {
	for _, s := range []string{openaiContent, openaiRole, vllmUsage, llamacppFinal, toolCallArgs, escapedContent,
		wholeChat, tgiError, vllmReason, vllmReasonToAnswer, "[DONE]", "\xff", `{"choices":[`, "nope"} {
		var o OpenAI
		data := []byte(s)
		o.Inspect(data) // warm the parser's buffers
		if n := testing.AllocsPerRun(200, func() { o.Inspect(data) }); n != 0 {
			t.Errorf("Inspect(%.40q): %v allocs per call, want 0", s, n)
		}
	}
}

func TestParseServerTimingAllocs(t *testing.T) {
	v := []byte(`queue;dur=1.25, tokenize;dur=0.5, prefill;desc="a, b";dur=30.125, sync;dur=2, decode1;dur=7.5, x;dur=1`)
	var tl stages.Timeline
	tl.Start(func() int64 { return 0 }, time.Time{})
	if n := testing.AllocsPerRun(200, func() { ParseServerTiming(v, &tl) }); n != 0 {
		t.Errorf("ParseServerTiming: %v allocs per call, want 0", n)
	}
}
