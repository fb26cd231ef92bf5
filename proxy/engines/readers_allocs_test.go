//go:build !race

package engines

import (
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

// TestReaderEventAllocs: once warm, Event allocates nothing, per reader, for
// its content events and its timing events.
func TestReaderEventAllocs(t *testing.T) {
	for _, c := range readerEvents {
		r, _ := NewReader(c.kind)
		var tl stages.Timeline
		tl.Start(func() int64 { return 0 }, time.Time{})
		data := []byte(c.data)
		r.Event(data, &tl) // warm the parser
		if n := testing.AllocsPerRun(200, func() { r.Event(data, &tl) }); n != 0 {
			t.Errorf("%s %s: %v allocs per Event, want 0", c.kind, c.name, n)
		}
	}
}

func TestReaderHeaderAllocs(t *testing.T) {
	vals := map[string][]byte{"X-Queue-Time": []byte("37"), "X-Validation-Time": []byte("2"),
		"Server-Timing": []byte("queue;dur=1.25, prefill;dur=30.125")}
	h := func(name string) []byte { return vals[name] }
	var tl stages.Timeline
	tl.Start(func() int64 { return 0 }, time.Time{})
	for _, k := range Kinds {
		r, _ := NewReader(k)
		if n := testing.AllocsPerRun(200, func() { r.Header(h, &tl) }); n != 0 {
			t.Errorf("%s: %v allocs per Header, want 0", k, n)
		}
	}
}

func TestLineScannerAllocs(t *testing.T) {
	line := []byte(ollamaContent + "\n")
	var stream []byte
	for range 64 {
		stream = append(stream, line...)
	}
	r := &loopReader{data: stream}
	sc := NewLineScanner(r, 0)
	for range 200 { // warm: the buffer reaches its working size
		sc.Next()
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := sc.Next(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("LineScanner.Next: %v allocs per line, want 0", n)
	}
}
