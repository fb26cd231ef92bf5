package sse_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/ttftlens/ttftlens/sse"
)

func TestAppendEvent(t *testing.T) {
	f := func(typ, data, want string) {
		t.Helper()
		if got := string(sse.AppendEvent([]byte("x"), []byte(typ), []byte(data))); got != "x"+want {
			t.Errorf("AppendEvent(%q, %q) = %q, want %q", typ, data, got, "x"+want)
		}
	}
	f("", "a", "data: a\n\n")
	f("", "", "data: \n\n")
	f("delta", `{"x":1}`, "event: delta\ndata: {\"x\":1}\n\n")
	f("", "a\nb", "data: a\ndata: b\n\n")
	f("", "a\r\nb\rc\n", "data: a\ndata: b\ndata: c\ndata: \n\n")
	f("t\nid: 5", "a", "event: t\ndata: a\n\n")
	f("t\r", "a", "event: t\ndata: a\n\n")
}

func TestAppendComment(t *testing.T) {
	f := func(text, want string) {
		t.Helper()
		if got := string(sse.AppendComment(nil, []byte(text))); got != want {
			t.Errorf("AppendComment(%q) = %q, want %q", text, got, want)
		}
	}
	f("done", ": done\n\n")
	f("", ": \n\n")
	f("a\nb", ": a\n: b\n\n")
}

// TestRoundTrip writes events with AppendEvent and AppendComment and reads them
// back with a Scanner.
func TestRoundTrip(t *testing.T) {
	events := []struct{ typ, data string }{
		{"", `{"choices":[{"delta":{"content":"Hello"}}]}`},
		{"message_start", `{"type":"message_start"}`},
		{"", ""},
		{"multi", "line one\nline two\n\nline four"},
		{"", " leading and trailing "},
		{"", "[DONE]"},
	}
	var stream []byte
	for _, e := range events {
		stream = sse.AppendEvent(stream, []byte(e.typ), []byte(e.data))
	}
	stream = sse.AppendComment(stream, []byte("ttftlens: upstream closed"))
	s := sse.NewScanner(bytes.NewReader(stream), 0)
	for _, e := range events {
		ev, err := s.Next()
		if err != nil || !ev.HasData || string(ev.Type) != e.typ || string(ev.Data) != e.data {
			t.Fatalf("got (%q, %q, %v), want (%q, %q)", ev.Type, ev.Data, err, e.typ, e.data)
		}
	}
	ev, err := s.Next()
	if err != nil || ev.HasData || ev.Comments != 1 || string(ev.Comment) != "ttftlens: upstream closed" {
		t.Fatalf("comment: got (%q, %v)", ev.Raw, err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
