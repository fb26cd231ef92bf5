package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

// decodeAll runs f over in, cut into pieces of at most piece bytes, as
// reads would give it; it returns the body, and the error that ended it.
func decodeAll(f *framing, in []byte, piece int) ([]byte, error) {
	var body []byte
	for len(in) > 0 {
		p := bytes.Clone(in[:min(piece, len(in))])
		in = in[len(p):]
		n, err := f.decode(p)
		body = append(body, p[:n]...)
		if err != nil {
			return body, err
		}
	}
	return body, nil
}

func TestFramingChunked(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		body     string
		done     bool
		extra    bool
		err      bool
		trailers string
	}{
		{name: "one chunk", in: "5\r\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "events", in: "f\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n", body: "data: {\"a\":1}\n\ndata: [DONE]\n\n", done: true},
		{name: "upper-case hex and leading zeros", in: "00A\r\n0123456789\r\n0\r\n\r\n", body: "0123456789", done: true},
		{name: "extensions", in: "5;name=value;x\r\nhello\r\n0;last\r\n\r\n", body: "hello", done: true},
		{name: "whitespace before an extension", in: "5 ;x\r\nhello\r\n0\r\n\r\n", body: "hello", done: true},
		{name: "bare LFs", in: "5\nhello\n0\n\n", body: "hello", done: true},
		{name: "not ended yet", in: "5\r\nhello\r\n3\r\nab", body: "helloab"},
		{name: "trailers", in: "2\r\nhi\r\n0\r\nServer-Timing: prefill;dur=12\r\nX-Other: 1\r\n\r\n", body: "hi", done: true,
			trailers: "Server-Timing: prefill;dur=12\nX-Other: 1\n"},
		{name: "bytes after the end", in: "2\r\nhi\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", body: "hi", done: true, extra: true},
		{name: "no digits", in: "\r\nhello", err: true},
		{name: "bad digit", in: "5x\r\nhello\r\n", err: true},
		{name: "data not followed by CRLF", in: "2\r\nhiX\r\n", body: "hi", err: true},
		{name: "CR without LF", in: "2\rhi", err: true},
		{name: "size overflowing", in: "fffffffffffffffff\r\n", err: true},
		{name: "endless size line", in: "1;" + strings.Repeat("x", maxChunkLine) + "\r\n", err: true},
		{name: "blank line's CR without LF", in: "0\r\n\rX", err: true},
	}
	for _, tt := range tests {
		for _, piece := range []int{1, 2, 3, 7, len(tt.in)} {
			var f framing
			f.reset(framingChunked, 0)
			body, err := decodeAll(&f, []byte(tt.in), piece)
			if string(body) != tt.body || (err != nil) != tt.err || f.done != tt.done || f.extra != tt.extra || string(f.trailers) != tt.trailers {
				t.Errorf("%s, in pieces of %d: body %q err %v done %v extra %v trailers %q; want %q err=%v done %v extra %v trailers %q",
					tt.name, piece, body, err, f.done, f.extra, f.trailers, tt.body, tt.err, tt.done, tt.extra, tt.trailers)
			}
			if err != nil && !errors.Is(err, errChunkFraming) {
				t.Errorf("%s: error %v, want errChunkFraming", tt.name, err)
			}
		}
	}
}

func TestFramingLengthAndClose(t *testing.T) {
	var f framing
	f.reset(framingLength, 5)
	body, _ := decodeAll(&f, []byte("hel"), 2)
	if string(body) != "hel" || f.done {
		t.Fatalf("length 5 after 3 bytes: %q done %v", body, f.done)
	}
	body, _ = decodeAll(&f, []byte("loXY"), 4)
	if string(body) != "lo" || !f.done || !f.extra {
		t.Fatalf("length 5 with 2 extra bytes: %q done %v extra %v", body, f.done, f.extra)
	}
	f.reset(framingLength, 0)
	if !f.done {
		t.Fatal("an empty body is not done at once")
	}
	f.reset(framingClose, 0)
	body, _ = decodeAll(&f, []byte("0\r\n\r\nanything"), 3)
	if string(body) != "0\r\n\r\nanything" || f.done {
		t.Fatalf("close-delimited: %q done %v", body, f.done)
	}
}

func TestFramingTrailers(t *testing.T) {
	var f framing
	long := "X-Filler: " + strings.Repeat("x", maxTrailerBytes) + "\r\n"
	in := "0\r\nServer-Timing: a;dur=1\r\n" + long + "server-timing-2:  b \r\n\r\n"
	f.reset(framingChunked, 0)
	if _, err := decodeAll(&f, []byte(in), 100); err != nil || !f.done {
		t.Fatalf("err %v done %v", err, f.done)
	}
	if got := string(f.trailer("server-timing")); got != "a;dur=1" {
		t.Errorf("Server-Timing %q", got)
	}
	if got := f.trailer("X-Filler"); got != nil {
		t.Errorf("a field over the limit was kept: %.40q", got)
	}
	if got := string(f.trailer("Server-Timing-2")); got != "b" {
		t.Errorf("the field after a dropped one: %q", got)
	}
	if len(f.trailers) > maxTrailerBytes {
		t.Errorf("kept %d trailer bytes, over %d", len(f.trailers), maxTrailerBytes)
	}
	if f.trailer("Missing") != nil {
		t.Error("a missing field has a value")
	}
}

// FuzzFraming checks the chunked decoder against Go's own (net/http's
// httputil.NewChunkedReader) up to the last chunk, and that the pieces a
// body is read in never change what it decodes to.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n", "3;x=y\r\nabc\r\n0\r\nA: b\r\n\r\n", "5\nhello\n0\n\n",
		"1\r\nx\r\n", "zz\r\n", "0\r\n\r\nextra", "a\r\n0123456789\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		var whole, cut framing
		whole.reset(framingChunked, 0)
		cut.reset(framingChunked, 0)
		wb, werr := decodeAll(&whole, in, len(in)+1)
		cb, cerr := decodeAll(&cut, in, int(piece)%16+1)
		if !bytes.Equal(wb, cb) || (werr == nil) != (cerr == nil) || whole.done != cut.done || whole.extra != cut.extra || !bytes.Equal(whole.trailers, cut.trailers) {
			t.Fatalf("whole: %q %v done %v extra %v; in pieces: %q %v done %v extra %v", wb, werr, whole.done, whole.extra, cb, cerr, cut.done, cut.extra)
		}
		if werr != nil || bytes.ContainsAny(in, " \t") {
			return // Go's reader is stricter about whitespace, and stops at errors differently
		}
		ref, rerr := io.ReadAll(httputil.NewChunkedReader(bufio.NewReader(bytes.NewReader(in))))
		if rerr == nil && !bytes.Equal(ref, wb) {
			t.Fatalf("body %q, Go's reader %q", wb, ref)
		}
		if rerr == nil && !whole.done && whole.state != trailerStart && whole.state != trailerLine && whole.state != trailerEndLF {
			t.Fatalf("Go's reader reached the last chunk, ours is in state %d", whole.state)
		}
	})
}
