package exporters

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/internal/logtest"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// line formats r the way LogSink.Emit does, synchronously.
func line(r *record.Record) []byte {
	var buf bytes.Buffer
	l := zerolog.New(&buf)
	e := l.Log()
	writeLine(e, r, &scratch{})
	e.Send()
	return buf.Bytes()
}

func TestLogGolden(t *testing.T) {
	for _, f := range loggedFixtures() {
		t.Run(f.name, func(t *testing.T) {
			got := line(f.record())
			checkLine(t, got)
			path := filepath.Join("testdata", "log", f.name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			var gv, wv map[string]any
			if err := json.Unmarshal(got, &gv); err != nil {
				t.Fatalf("line is not JSON: %v\n%s", err, got)
			}
			if err := json.Unmarshal(want, &wv); err != nil {
				t.Fatalf("golden is not JSON: %v", err)
			}
			for k, w := range wv {
				if g, ok := gv[k]; !ok {
					t.Errorf("field %q missing, want %v", k, w)
				} else if !reflect.DeepEqual(g, w) {
					t.Errorf("field %q = %v, want %v", k, g, w)
				}
			}
			for k, g := range gv {
				if _, ok := wv[k]; !ok {
					t.Errorf("unexpected field %q = %v", k, g)
				}
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Errorf("text differs at byte %d:\n got: %s\nwant: %s", i, got, want)
			}
		})
	}
}

// checkLine asserts the invariants every line keeps: one line, valid JSON,
// stages_ms adding up to ttft_ms to the microsecond, no negative stage.
func checkLine(t *testing.T, l []byte) map[string]json.RawMessage {
	t.Helper()
	if bytes.IndexByte(l, '\n') != len(l)-1 {
		t.Fatalf("not exactly one line: %q", l)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(l, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, l)
	}
	for _, k := range []string{"time", "level", "msg", "request_id", "trace_id", "end_reason", "e2e_ms", "tokens_out", "bytes_out"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing: %s", k, l)
		}
	}
	ttft, hasTTFT := m["ttft_ms"]
	st, hasStages := m["stages_ms"]
	if hasTTFT != hasStages {
		t.Fatalf("ttft_ms and stages_ms must come together: %s", l)
	}
	if !hasTTFT {
		return m
	}
	var stageMap map[string]json.Number
	if err := json.Unmarshal(st, &stageMap); err != nil {
		t.Fatal(err)
	}
	if len(stageMap) != int(stages.NumStages) {
		t.Errorf("stages_ms has %d stages: %s", len(stageMap), st)
	}
	var sum int64
	for i := range stages.NumStages {
		v, ok := stageMap[stages.Stage(i).String()]
		if !ok {
			t.Errorf("stage %s missing", stages.Stage(i))
		}
		u := parseMicros(t, string(v))
		if u < 0 {
			t.Errorf("stage %s negative: %s", stages.Stage(i), v)
		}
		sum += u
	}
	if want := parseMicros(t, string(ttft)); sum != want {
		t.Errorf("stages add up to %d µs, ttft_ms is %d µs: %s", sum, want, l)
	}
	return m
}

// parseMicros parses a decimal millisecond value exactly into microseconds.
func parseMicros(t *testing.T, s string) int64 {
	t.Helper()
	ip, fp, _ := strings.Cut(s, ".")
	if len(fp) > 3 {
		t.Fatalf("%q has more than microsecond precision", s)
	}
	fp += strings.Repeat("0", 3-len(fp))
	i, err1 := strconv.ParseInt(ip, 10, 64)
	f, err2 := strconv.ParseInt(fp, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("bad millis %q", s)
	}
	if strings.HasPrefix(ip, "-") {
		return i*1000 - f
	}
	return i*1000 + f
}

func TestStageSumProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := range n {
		r := new(record.Record)
		r.Timeline.Start(fixedClock, wall)
		at := time.Duration(0)
		for m := stages.GatewayDone; m < stages.NumMarks; m++ {
			// Gaps from sub-microsecond to seconds, log-uniform.
			at += time.Duration(rng.Float64() * float64(int64(1)<<rng.IntN(34)))
			if rng.IntN(6) > 0 || m == stages.FirstTokenFlushed {
				r.Timeline.MarkAt(m, at)
			}
		}
		for d := range stages.NumEngineDurs {
			if rng.IntN(3) == 0 {
				continue
			}
			v := time.Duration(rng.Int64N(int64(2*time.Second))) - 200*ms
			if rng.IntN(10) == 0 {
				v = time.Duration(rng.Int64N(1 << 62)) // absurd
			}
			r.Timeline.SetEngine(stages.EngineDur(d), v)
		}
		l := line(r)
		m := checkLine(t, l)
		bd := r.Breakdown()
		if got, want := parseMicros(t, string(m["ttft_ms"])), stages.Micros(bd.TTFT); got != want {
			t.Fatalf("ttft_ms = %d µs, true TTFT %v: %s", got, bd.TTFT, l)
		}
		// Each stage is within 1 µs of its true value.
		var stageMap map[string]json.Number
		_ = json.Unmarshal(m["stages_ms"], &stageMap)
		for s := range stages.NumStages {
			got := parseMicros(t, string(stageMap[stages.Stage(s).String()]))
			if diff := got*1000 - int64(bd.Stages[s]); diff <= -1000 || diff >= 1000 {
				t.Fatalf("case %d: stage %s = %d µs, true %v", i, stages.Stage(s), got, bd.Stages[s])
			}
		}
		if t.Failed() {
			t.Fatalf("case %d failed", i)
		}
	}
}

func TestLogSinkWritesEveryLineAndCloseFlushes(t *testing.T) {
	var out logtest.Lines
	s := NewLogSink(&out, LogOptions{})
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := fixtures[g%len(fixtures)].record()
			for range each {
				s.Emit(r)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	for _, l := range lines {
		checkLine(t, []byte(l+"\n"))
	}
	if s.Dropped() != 0 || s.Written() != goroutines*each {
		t.Errorf("dropped %d written %d", s.Dropped(), s.Written())
	}
	s.Emit(fixtures[0].record())
	if s.Dropped() != 1 {
		t.Errorf("Emit after Close: dropped = %d, want 1", s.Dropped())
	}
}

// writeCounter counts its writes and signals each on wrote.
type writeCounter struct {
	mu     sync.Mutex
	writes int
	wrote  chan struct{}
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

// TestLogSinkSpacesItsWrites: a line that arrives when nothing was written
// for a spacing goes out at once; the lines after it wait for the spacing
// and go out in one write (a write wakes the runtime's monitor thread),
// however they arrive; Close writes what waits without waiting it out.
func TestLogSinkSpacesItsWrites(t *testing.T) {
	w := writeCounter{wrote: make(chan struct{}, 1)}
	s := NewLogSink(&w, LogOptions{writeSpacing: time.Hour})
	const lines = 20
	r := fixtures[0].record()
	s.Emit(r)
	<-w.wrote // the first line, at once
	for range lines - 1 {
		s.Emit(r)
		runtime.Gosched() // let the writer take each line on its own, if it would
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Written() != lines || w.writes != 2 {
		t.Errorf("%d lines written in %d writes, want %d in 2 (the first at once, the rest at the close)", s.Written(), w.writes, lines)
	}
}

// stuckWriter blocks every Write until release is closed.
type stuckWriter struct {
	release chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return len(p), nil
}

func TestLogSinkNeverBlocks(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{}), entered: make(chan struct{})}
	const bufBytes = 4096
	s := NewLogSink(w, LogOptions{BufferBytes: bufBytes, CloseTimeout: 50 * time.Millisecond})
	r := fixtures[0].record()
	// Lines that can escape dropping: a buffer in the stuck writer's hands
	// and a full one waiting.
	kept := uint64(2 * (bufBytes / len(line(r))))
	const n = 1000
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for range n {
			s.Emit(r)
		}
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("Emit blocked on a stuck writer")
	}
	<-w.entered
	if d := s.Dropped(); d < n-kept {
		t.Errorf("dropped %d of %d, want at least %d", d, n, n-kept)
	}
	start := time.Now()
	if err := s.Close(); !errors.Is(err, ErrCloseTimeout) {
		t.Errorf("Close with a stuck writer = %v, want ErrCloseTimeout", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v", el)
	}
	close(w.release) // the writer goroutine now drains and exits (goleak checks)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("writer goroutine did not exit after the writer returned")
	}
	if got := s.Dropped() + s.Written(); got != n {
		t.Errorf("dropped %d + written %d = %d, want every line counted (%d)", s.Dropped(), s.Written(), got, n)
	}
}

// failWriter fails every write after taking part of it.
type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return len(p) / 2, errors.New("disk full") }

func TestLogSinkCountsWriteErrors(t *testing.T) {
	s := NewLogSink(failWriter{}, LogOptions{})
	r := fixtures[0].record()
	for range 10 {
		s.Emit(r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Dropped() + s.Written(); got != 10 || s.Dropped() == 0 {
		t.Errorf("dropped %d written %d, want 10 lines counted, some dropped", s.Dropped(), s.Written())
	}
}
