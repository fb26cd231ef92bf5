package engines

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

func parseST(v string) (*stages.Timeline, int) {
	var tl stages.Timeline
	tl.Start(func() int64 { return 0 }, time.Time{})
	n := ParseServerTiming([]byte(v), &tl)
	return &tl, n
}

func TestParseServerTiming(t *testing.T) {
	type want = map[stages.EngineDur]time.Duration
	const ms = time.Millisecond
	tests := []struct {
		name string
		in   string
		n    int
		want want
	}{
		{"empty", "", 0, want{}},
		{"spaces only", "   ", 0, want{}},
		{"commas only", ",,, ,", 0, want{}},
		{"engine's own output", "queue;dur=1.25, tokenize;dur=0.5, media;dur=0, prefill;dur=30.125, sync;dur=2, decode1;dur=7.5", 6,
			want{stages.EngineQueue: 1250 * time.Microsecond, stages.EngineTokenize: 500 * time.Microsecond,
				stages.EngineMedia: 0, stages.EnginePrefill: 30125 * time.Microsecond, stages.EngineSync: 2 * ms,
				stages.EngineFirstDecode: 7500 * time.Microsecond}},
		{"engine's own output with recv and emit", "queue;dur=0.03, tokenize;dur=0.02, media;dur=0, prefill;dur=2.5, sync;dur=0, decode1;dur=0.001, recv;dur=0.041, emit;dur=0.012", 8,
			want{stages.EngineQueue: 30 * time.Microsecond, stages.EngineTokenize: 20 * time.Microsecond,
				stages.EngineMedia: 0, stages.EnginePrefill: 2500 * time.Microsecond, stages.EngineSync: 0,
				stages.EngineFirstDecode: time.Microsecond, stages.EngineRecv: 41 * time.Microsecond, stages.EngineEmit: 12 * time.Microsecond}},
		{"unread", "recv;dur=0.041, unread;dur=0.7", 2, want{stages.EngineRecv: 41 * time.Microsecond, stages.EngineUnread: 700 * time.Microsecond}},
		{"stages a reader does not know are skipped", "recv;dur=1, parse;dur=2, detokenize;dur=3, emit;dur=4, flush;dur=5", 2,
			want{stages.EngineRecv: ms, stages.EngineEmit: 4 * ms}},
		{"no spaces", "queue;dur=1,prefill;dur=2", 2, want{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{"lots of spaces", "  queue ; dur = 3 ,\tprefill\t;\tdur\t=\t4\t", 2, want{stages.EngineQueue: 3 * ms, stages.EnginePrefill: 4 * ms}},
		{"desc before dur", `prefill;desc="Prefill";dur=12.5`, 1, want{stages.EnginePrefill: 12500 * time.Microsecond}},
		{"desc after dur", `prefill;dur=12.5;desc="Prefill"`, 1, want{stages.EnginePrefill: 12500 * time.Microsecond}},
		{"quoted desc with commas", `queue;desc="a, b, c";dur=1, prefill;dur=2`, 2, want{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{"escaped quote in desc", `queue;desc="say \"hi\", then";dur=1, prefill;dur=2`, 2,
			want{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{"escaped backslash before closing quote", `queue;desc="a\\";dur=1, prefill;dur=2`, 2,
			want{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{"quoted desc with semicolon", `prefill;desc="a;b";dur=2`, 1, want{stages.EnginePrefill: 2 * ms}},
		{"dur= inside a quoted desc is not the dur", `prefill;desc="x; dur=5; y";dur=2`, 1, want{stages.EnginePrefill: 2 * ms}},
		{"unknown names skipped", "cdn-cache;desc=HIT, edge;dur=4, queue;dur=1, total;dur=99", 1, want{stages.EngineQueue: ms}},
		{"names are case-sensitive", "Queue;dur=1, PREFILL;dur=2", 0, want{}},
		{"name prefix is not the name", "prefill2;dur=1, pre;dur=2, decode;dur=3", 0, want{}},
		{"missing dur", "queue, prefill;desc=x, tokenize;dur=1", 1, want{stages.EngineTokenize: ms}},
		{"dur without value", "queue;dur, prefill;dur=, media;dur=1", 1, want{stages.EngineMedia: ms}},
		{"upper-case DUR", "queue;DUR=1, prefill;Dur=2", 2, want{stages.EngineQueue: ms, stages.EnginePrefill: 2 * ms}},
		{"first dur param wins", "queue;dur=1;dur=2", 1, want{stages.EngineQueue: ms}},
		{"duplicate names: last wins", "queue;dur=1, queue;dur=2", 2, want{stages.EngineQueue: 2 * ms}},
		{"negative kept raw", "queue;dur=-3", 1, want{stages.EngineQueue: -3 * ms}},
		{"exponent", "prefill;dur=1.5e1", 1, want{stages.EnginePrefill: 15 * ms}},
		{"NaN", "queue;dur=NaN, prefill;dur=nan", 0, want{}},
		{"Inf", "queue;dur=Inf, prefill;dur=+Inf, media;dur=-Inf, sync;dur=infinity", 0, want{}},
		{"huge", "queue;dur=1e308, prefill;dur=-1e308, media;dur=1e400", 0, want{}},
		{"a day is the limit", "queue;dur=86400000, prefill;dur=86400000.001, media;dur=-86400000", 2,
			want{stages.EngineQueue: 24 * time.Hour, stages.EngineMedia: -24 * time.Hour}},
		{"garbage value", "queue;dur=1ms, prefill;dur=abc, media;dur=1.2.3", 0, want{}},
		{"bad dur does not hide later entries", "queue;dur=x, prefill;dur=7", 1, want{stages.EnginePrefill: 7 * ms}},
		{"unterminated quote swallows the rest", `queue;desc="oops, prefill;dur=2`, 0, want{}},
		{"trailing comma", "queue;dur=1,", 1, want{stages.EngineQueue: ms}},
		{"sub-microsecond", "prefill;dur=0.000001", 1, want{stages.EnginePrefill: time.Nanosecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl, n := parseST(tc.in)
			if n != tc.n {
				t.Errorf("ParseServerTiming(%q) = %d, want %d", tc.in, n, tc.n)
			}
			for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
				got, ok := tl.Engine(d)
				w, wok := tc.want[d]
				if ok != wok || got != w {
					t.Errorf("%q: %v = %v (set %v), want %v (set %v)", tc.in, d, got, ok, w, wok)
				}
			}
		})
	}
}

// TestServerTimingMicrosecondRoundTrip: the reference engine writes whole
// microseconds as milliseconds with up to three decimals (refengine/generate.go,
// strconv.AppendFloat(us/1000, 'f', -1)). Reading them back must give the
// same duration, not one nanosecond less from truncating 1.005*1e6 =
// 1004999.9999999999.
func TestServerTimingMicrosecondRoundTrip(t *testing.T) {
	bad := 0
	for us := int64(0); us <= 200_000; us++ {
		v := "prefill;dur=" + strconv.FormatFloat(float64(us)/1000, 'f', -1, 64)
		tl, n := parseST(v)
		got, _ := tl.Engine(stages.EnginePrefill)
		if want := time.Duration(us) * time.Microsecond; n != 1 || got != want {
			if bad++; bad <= 5 {
				t.Errorf("%q: got %v (%d ns), want %v", v, got, int64(got), want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of 200001 microsecond values did not round-trip", bad)
	}
}

// checkSane asserts that every recorded engine duration is a plausible
// measurement: within a day either way (so never a NaN- or Inf-derived or
// overflowed value).
func checkSane(t *testing.T, in []byte, tl *stages.Timeline, n int) {
	t.Helper()
	set := 0
	for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
		v, ok := tl.Engine(d)
		if !ok {
			continue
		}
		set++
		if v < -24*time.Hour || v > 24*time.Hour {
			t.Fatalf("ParseServerTiming(%q) recorded %v = %v (%d ns)", in, d, v, int64(v))
		}
	}
	if n < set || (n > 0 && set == 0) {
		t.Fatalf("ParseServerTiming(%q) = %d, but %d durations set", in, n, set)
	}
}

func FuzzServerTiming(f *testing.F) {
	// The reference engine's output.
	f.Add("queue;dur=1.25, tokenize;dur=0.5, media;dur=0, prefill;dur=30.125, sync;dur=2, decode1;dur=7.5")
	// Quoted descs with separators and escapes.
	f.Add(`prefill;desc="a, b; c \"d\"";dur=2, queue;dur=1`)
	f.Add(`queue;desc="\\";dur=1`)
	// Values that must never be recorded.
	f.Add("queue;dur=NaN, prefill;dur=Inf, media;dur=-1e308, sync;dur=1e400")
	f.Add("decode1;dur=-86400000.0000001")
	// Malformed.
	f.Add(`queue;dur="1"`)
	f.Add(`"`)
	f.Add(";;;,,,===")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		in := []byte(s)
		tl, n := parseST(s)
		checkSane(t, in, tl, n)
		if string(in) != s {
			t.Fatalf("input modified")
		}
		tl2, n2 := parseST(s)
		if n != n2 {
			t.Fatalf("ParseServerTiming(%q) not deterministic: %d then %d", s, n, n2)
		}
		for d := stages.EngineQueue; d < stages.NumEngineDurs; d++ {
			v1, ok1 := tl.Engine(d)
			v2, ok2 := tl2.Engine(d)
			if v1 != v2 || ok1 != ok2 {
				t.Fatalf("ParseServerTiming(%q) not deterministic for %v", s, d)
			}
		}
		if n > int(math.MaxInt32) {
			t.Fatal("count overflow")
		}
	})
}
