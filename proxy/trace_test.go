package proxy

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/record"
)

const (
	// The W3C Trace Context spec's own example (§3.2.2.x).
	specTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	specParent = "00f067aa0ba902b7"
	specHeader = "00-" + specTrace + "-" + specParent + "-01"
)

func mustTrace(t testing.TB, s string) record.TraceID {
	t.Helper()
	var id record.TraceID
	if n, err := hex.Decode(id[:], []byte(s)); err != nil || n != len(id) {
		t.Fatalf("bad test trace id %q", s)
	}
	return id
}

func mustSpan(t testing.TB, s string) record.SpanID {
	t.Helper()
	var id record.SpanID
	if n, err := hex.Decode(id[:], []byte(s)); err != nil || n != len(id) {
		t.Fatalf("bad test span id %q", s)
	}
	return id
}

func TestParseTraceparent(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		ok     bool
		trace  string // when ok
		parent string
		flags  byte
	}{
		// Valid.
		{"spec example, sampled", specHeader, true, specTrace, specParent, 0x01},
		{"not sampled", "00-" + specTrace + "-" + specParent + "-00", true, specTrace, specParent, 0x00},
		{"unknown flags kept", "00-" + specTrace + "-" + specParent + "-ff", true, specTrace, specParent, 0xff},
		{"trace id with leading zeros", "00-00000000000000000000000000000001-0000000000000001-01", true,
			"00000000000000000000000000000001", "0000000000000001", 0x01},

		// Version.
		{"version ff is invalid", "ff-" + specTrace + "-" + specParent + "-01", false, "", "", 0},
		{"future version, exact length", "cc-" + specTrace + "-" + specParent + "-01", true, specTrace, specParent, 0x01},
		{"future version with extra fields", "cc-" + specTrace + "-" + specParent + "-01-what-the-future-will-be-like",
			true, specTrace, specParent, 0x01},
		{"version 01 with a trailing dash only", "01-" + specTrace + "-" + specParent + "-01-", true, specTrace, specParent, 0x01},
		{"future version, extra without dash", "cc-" + specTrace + "-" + specParent + "-01.what", false, "", "", 0},
		{"future version, flags run on", "cc-" + specTrace + "-" + specParent + "-0100", false, "", "", 0},
		{"version 00 with extra fields", specHeader + "-extra", false, "", "", 0},
		{"version 00 with trailing space", specHeader + " ", false, "", "", 0},
		{"version not hex", "0g-" + specTrace + "-" + specParent + "-01", false, "", "", 0},
		{"version upper case", "0A-" + specTrace + "-" + specParent + "-01", false, "", "", 0},
		{"version dash", "-0-" + specTrace + "-" + specParent + "-01", false, "", "", 0},

		// Ids.
		{"all-zero trace id", "00-00000000000000000000000000000000-" + specParent + "-01", false, "", "", 0},
		{"all-zero parent id", "00-" + specTrace + "-0000000000000000-01", false, "", "", 0},
		{"upper-case trace id", "00-" + strings.ToUpper(specTrace) + "-" + specParent + "-01", false, "", "", 0},
		{"upper-case parent id", "00-" + specTrace + "-" + strings.ToUpper(specParent) + "-01", false, "", "", 0},
		{"upper-case flags", "00-" + specTrace + "-" + specParent + "-0A", false, "", "", 0},
		{"non-hex in trace id", "00-" + specTrace[:31] + "g-" + specParent + "-01", false, "", "", 0},
		{"dash inside trace id", "00-" + specTrace[:10] + "-" + specTrace[11:] + "-" + specParent + "-01", false, "", "", 0},
		{"dash inside parent id", "00-" + specTrace + "-" + specParent[:5] + "-" + specParent[6:] + "-01", false, "", "", 0},
		{"dash as flags", "00-" + specTrace + "-" + specParent + "--1", false, "", "", 0},

		// Lengths.
		{"empty", "", false, "", "", 0},
		{"short trace id", "00-" + specTrace[1:] + "-" + specParent + "-01", false, "", "", 0},
		{"long trace id", "00-" + specTrace + "a-" + specParent + "-01", false, "", "", 0},
		{"short parent id", "00-" + specTrace + "-" + specParent[1:] + "-01", false, "", "", 0},
		{"long parent id", "00-" + specTrace + "-" + specParent + "a-01", false, "", "", 0},
		{"one-digit flags", "00-" + specTrace + "-" + specParent + "-1", false, "", "", 0},
		{"three-digit flags", "00-" + specTrace + "-" + specParent + "-011", false, "", "", 0},
		{"no flags", "00-" + specTrace + "-" + specParent, false, "", "", 0},

		// Separators.
		{"underscores", "00_" + specTrace + "_" + specParent + "_01", false, "", "", 0},
		{"first separator wrong", "00." + specTrace + "-" + specParent + "-01", false, "", "", 0},
		{"second separator wrong", "00-" + specTrace + "." + specParent + "-01", false, "", "", 0},
		{"third separator wrong", "00-" + specTrace + "-" + specParent + ".01", false, "", "", 0},
		{"leading space", " " + specHeader[:54], false, "", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseTraceparent([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("parseTraceparent(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			}
			if !ok {
				return // the result is unspecified; continueOrStart discards it
			}
			want := traceContext{trace: mustTrace(t, tc.trace), parent: mustSpan(t, tc.parent), flags: tc.flags}
			if got != want {
				t.Errorf("parseTraceparent(%q) = %+v, want %+v", tc.in, got, want)
			}
		})
	}
}

func TestContinueOrStart(t *testing.T) {
	tests := []struct {
		name   string
		header string
		cont   bool
		flags  byte
	}{
		{"sampled caller", specHeader, true, 0x01},
		{"unsampled caller keeps its flags", "00-" + specTrace + "-" + specParent + "-00", true, 0x00},
		{"future version", "cc-" + specTrace + "-" + specParent + "-03-x", true, 0x03},
		{"no header starts a sampled trace", "", false, 0x01},
		{"bad header starts a sampled trace", "ff-" + specTrace + "-" + specParent + "-00", false, 0x01},
		{"zero trace starts a new one", "00-00000000000000000000000000000000-" + specParent + "-00", false, 0x01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seenSpans := map[record.SpanID]bool{}
			seenTraces := map[record.TraceID]bool{}
			for range 50 {
				got := continueOrStart([]byte(tc.header))
				if got.span.IsZero() {
					t.Fatal("zero span id")
				}
				if got.trace == (record.TraceID{}) {
					t.Fatal("zero trace id")
				}
				if got.flags != tc.flags {
					t.Errorf("flags = %02x, want %02x", got.flags, tc.flags)
				}
				if tc.cont {
					if got.trace != mustTrace(t, specTrace) {
						t.Errorf("trace = %v, want the caller's %s", got.trace, specTrace)
					}
					if got.parent != mustSpan(t, specParent) {
						t.Errorf("parent = %v, want the caller's span %s", got.parent, specParent)
					}
					if got.span == got.parent {
						t.Error("our span equals the caller's")
					}
				} else {
					if !got.parent.IsZero() {
						t.Errorf("new trace has a parent %v", got.parent)
					}
					seenTraces[got.trace] = true
				}
				seenSpans[got.span] = true
			}
			if len(seenSpans) != 50 {
				t.Errorf("50 calls made %d distinct span ids", len(seenSpans))
			}
			if !tc.cont && len(seenTraces) != 50 {
				t.Errorf("50 new traces made %d distinct trace ids", len(seenTraces))
			}
		})
	}
}

func TestAppendTraceparentRoundTrip(t *testing.T) {
	for _, header := range []string{
		specHeader,
		"00-" + specTrace + "-" + specParent + "-00",
		"00-" + specTrace + "-" + specParent + "-ff",
		"7f-" + specTrace + "-" + specParent + "-09-more",
		"", // a new trace
	} {
		tc := continueOrStart([]byte(header))
		prefix := []byte("traceparent: ")
		out := tc.appendTraceparent(bytes.Clone(prefix))
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("appendTraceparent overwrote dst: %q", out)
		}
		v := out[len(prefix):]
		if len(v) != 55 || !bytes.HasPrefix(v, []byte("00-")) {
			t.Errorf("appendTraceparent = %q: want a version 00, 55-byte value", v)
		}
		back, ok := parseTraceparent(v)
		if !ok {
			t.Fatalf("our own header %q does not parse", v)
		}
		if back.trace != tc.trace || back.parent != tc.span || back.flags != tc.flags {
			t.Errorf("round trip of %+v gave %+v (want our span as the parent)", tc, back)
		}
	}
}

func TestSaneRequestID(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"", false},
		{"a", true},
		{"0af7651916cd43dd8448eb211c80319c", true},
		{"req-2024-05-01T12:00:00Z", true},
		{"user@example.com/run_1+2=3~x.y", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"has space", false},
		{"tab\there", false},
		{"new\nline", false},
		{"cr\rlf", false},
		{"nul\x00", false},
		{"quote\"", false},
		{"semi;colon", false},
		{"comma,", false},
		{"<script>", false},
		{"percent%20", false},
		{"back\\slash", false},
		{"ünïcode", false},
		{"\xff", false},
		{"hash#", false},
		{"star*", false},
	}
	for _, tc := range tests {
		if got := saneRequestID([]byte(tc.in)); got != tc.want {
			t.Errorf("saneRequestID(%.40q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if len(id) != 32 {
			t.Fatalf("newRequestID() = %q: %d chars, want 32", id, len(id))
		}
		for _, c := range []byte(id) {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				t.Fatalf("newRequestID() = %q: not lowercase hex", id)
			}
		}
		if id == strings.Repeat("0", 32) {
			t.Fatal("all-zero request id")
		}
		if !saneRequestID([]byte(id)) {
			t.Fatalf("our own id %q is not sane", id)
		}
		if seen[id] {
			t.Fatalf("duplicate request id %q", id)
		}
		seen[id] = true
	}
}

func TestRandomIDNeverZero(t *testing.T) {
	// One byte has a 1/256 chance of being zero per draw: many draws must
	// still never return zero.
	for _, n := range []int{1, 3, 8, 9, 16} {
		b := make([]byte, n)
		for range 5000 {
			randomID(b)
			if bytes.Count(b, []byte{0}) == n {
				t.Fatalf("randomID(%d bytes) returned all zero", n)
			}
		}
	}
}

func FuzzTraceparent(f *testing.F) {
	f.Add([]byte(specHeader))
	f.Add([]byte("cc-" + specTrace + "-" + specParent + "-01-what-the-future-will-be-like"))
	f.Add([]byte("ff-" + specTrace + "-" + specParent + "-01"))
	f.Add([]byte("00-00000000000000000000000000000000-" + specParent + "-01"))
	f.Add([]byte("00-" + specTrace + "-0000000000000000-01"))
	f.Add([]byte("00-" + strings.ToUpper(specTrace) + "-" + specParent + "-01"))
	f.Add([]byte("00-" + specTrace + "-" + specParent + "-01-"))
	f.Add([]byte("00--------------------------------------------------1"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, v []byte) {
		tc, ok := parseTraceparent(v)
		if !ok {
			// A rejected header must start a fresh, sampled trace.
			ours := continueOrStart(v)
			if ours.trace == (record.TraceID{}) || ours.span.IsZero() || !ours.parent.IsZero() || ours.flags != 0x01 {
				t.Fatalf("continueOrStart(%q) after rejection = %+v", v, ours)
			}
			return
		}
		if len(v) < 55 || string(v[:2]) == "ff" || (string(v[:2]) == "00" && len(v) != 55) {
			t.Fatalf("accepted %q", v)
		}
		if tc.trace.String() != string(v[3:35]) || tc.parent.String() != string(v[36:52]) {
			t.Fatalf("accepted %q as %+v", v, tc)
		}
		if tc.trace == (record.TraceID{}) || tc.parent.IsZero() {
			t.Fatalf("accepted zero ids in %q", v)
		}
		// Continue it, send it on, and read it back.
		ours := continueOrStart(v)
		if ours.trace != tc.trace || ours.parent != tc.parent || ours.flags != tc.flags || ours.span.IsZero() {
			t.Fatalf("continueOrStart(%q) = %+v, parse gave %+v", v, ours, tc)
		}
		out := ours.appendTraceparent(nil)
		back, ok := parseTraceparent(out)
		if !ok || back.trace != tc.trace || back.parent != ours.span || back.flags != tc.flags {
			t.Fatalf("round trip %q -> %q -> %+v, %v", v, out, back, ok)
		}
	})
}
