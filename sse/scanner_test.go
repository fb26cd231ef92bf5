package sse_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ttftlens/ttftlens/sse"
)

var (
	errEOF      = io.ErrUnexpectedEOF.Error()
	errTooLarge = sse.ErrEventTooLarge.Error()
)

// TestScannerRules pins each WHATWG event-stream rule. Every case is also run one
// byte per read and against the naive oracle.
func TestScannerRules(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int // 0: DefaultLimit
		want  []rec
	}{
		{"empty stream", "", 0, nil},
		{"single data LF", "data: a\n\n", 0, []rec{{Raw: "data: a\n\n", Data: ptr("a")}}},
		{"CRLF", "data: a\r\n\r\n", 0, []rec{{Raw: "data: a\r\n\r\n", Data: ptr("a")}}},
		{"CR only", "data: a\r\rdata: b\r\r", 0, []rec{
			{Raw: "data: a\r\r", Data: ptr("a")},
			{Raw: "data: b\r\r", Data: ptr("b")},
		}},
		{"CR then CRLF blank line", "data: a\r\r\ndata: b\n\n", 0, []rec{
			{Raw: "data: a\r\r\n", Data: ptr("a")},
			{Raw: "data: b\n\n", Data: ptr("b")},
		}},
		{"mixed line ends", "data: a\rdata: b\r\ndata: c\n\r\n", 0, []rec{
			{Raw: "data: a\rdata: b\r\ndata: c\n\r\n", Data: ptr("a\nb\nc")},
		}},
		{"LF CR is two line ends", "data: a\n\rdata: b\n\n", 0, []rec{
			{Raw: "data: a\n\r", Data: ptr("a")},
			{Raw: "data: b\n\n", Data: ptr("b")},
		}},
		{"multi-line data", "data: a\ndata: b\ndata: c\n\n", 0, []rec{
			{Raw: "data: a\ndata: b\ndata: c\n\n", Data: ptr("a\nb\nc")},
		}},
		{"empty data lines kept", "data\ndata:\ndata: \n\n", 0, []rec{
			{Raw: "data\ndata:\ndata: \n\n", Data: ptr("\n\n")},
		}},
		{"field without colon has empty value", "data\n\n", 0, []rec{{Raw: "data\n\n", Data: ptr("")}}},
		{"only one leading space stripped", "data:  a \n\n", 0, []rec{{Raw: "data:  a \n\n", Data: ptr(" a ")}}},
		{"no space after colon", "data:a\n\n", 0, []rec{{Raw: "data:a\n\n", Data: ptr("a")}}},
		{"tab is not stripped", "data:\ta\n\n", 0, []rec{{Raw: "data:\ta\n\n", Data: ptr("\ta")}}},
		{"value keeps later colons", "data: a: b:c\n\n", 0, []rec{{Raw: "data: a: b:c\n\n", Data: ptr("a: b:c")}}},
		{"event type last wins", "event: a\nevent: b\ndata: x\n\n", 0, []rec{
			{Raw: "event: a\nevent: b\ndata: x\n\n", Type: "b", Data: ptr("x")},
		}},
		{"event type is per block", "event: a\ndata: x\n\ndata: y\n\n", 0, []rec{
			{Raw: "event: a\ndata: x\n\n", Type: "a", Data: ptr("x")},
			{Raw: "data: y\n\n", Data: ptr("y")},
		}},
		{"field names are case sensitive", "Data: x\nEVENT: y\n\n", 0, []rec{{Raw: "Data: x\nEVENT: y\n\n"}}},
		{"space before colon makes another field", "data : x\n\n", 0, []rec{{Raw: "data : x\n\n"}}},
		{"unknown fields ignored", "foo: bar\nbaz\ndata: x\n\n", 0, []rec{
			{Raw: "foo: bar\nbaz\ndata: x\n\n", Data: ptr("x")},
		}},
		{"id", "id: 42\ndata: x\n\n", 0, []rec{{Raw: "id: 42\ndata: x\n\n", ID: ptr("42"), Data: ptr("x")}}},
		{"empty id is an id", "id\n\nid:\n\n", 0, []rec{{Raw: "id\n\n", ID: ptr("")}, {Raw: "id:\n\n", ID: ptr("")}}},
		{"id with NUL ignored", "id: 1\nid: a\x00b\n\n", 0, []rec{{Raw: "id: 1\nid: a\x00b\n\n", ID: ptr("1")}}},
		{"only NUL id ignored", "id: a\x00\n\n", 0, []rec{{Raw: "id: a\x00\n\n"}}},
		{"retry", "retry: 3000\n\n", 0, []rec{{Raw: "retry: 3000\n\n", Retry: ptr[int64](3000)}}},
		{"retry zero", "retry:0\n\n", 0, []rec{{Raw: "retry:0\n\n", Retry: ptr[int64](0)}}},
		{"retry non-digits ignored", "retry: 10\nretry: 1a\nretry: -1\nretry: +2\nretry: 1.5\nretry:  3\nretry: \nretry\n\n", 0, []rec{
			{Raw: "retry: 10\nretry: 1a\nretry: -1\nretry: +2\nretry: 1.5\nretry:  3\nretry: \nretry\n\n", Retry: ptr[int64](10)},
		}},
		{"retry max int64", "retry: 9223372036854775807\n\n", 0, []rec{
			{Raw: "retry: 9223372036854775807\n\n", Retry: ptr[int64](9223372036854775807)},
		}},
		{"retry overflow ignored", "retry: 9223372036854775808\n\n", 0, []rec{{Raw: "retry: 9223372036854775808\n\n"}}},
		{"comment only block", ": ping\n\n", 0, []rec{{Raw: ": ping\n\n", Comment: ptr("ping"), Comments: 1}}},
		{"comments counted, first kept", ":a\n: b\n:\ndata: x\n\n", 0, []rec{
			{Raw: ":a\n: b\n:\ndata: x\n\n", Comment: ptr("a"), Comments: 3, Data: ptr("x")},
		}},
		{"comment keeps second space", ":  two\n\n", 0, []rec{{Raw: ":  two\n\n", Comment: ptr(" two"), Comments: 1}}},
		{"lone blank lines", "\n\r\n\r", 0, []rec{{Raw: "\n"}, {Raw: "\r\n"}, {Raw: "\r"}}},
		{"BOM skipped", "\xEF\xBB\xBFdata: a\n\n", 0, []rec{{Raw: "\xEF\xBB\xBFdata: a\n\n", Data: ptr("a")}}},
		{"BOM then blank line", "\xEF\xBB\xBF\ndata: a\n\n", 0, []rec{{Raw: "\xEF\xBB\xBF\n"}, {Raw: "data: a\n\n", Data: ptr("a")}}},
		{"only first BOM skipped", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n", 0, []rec{{Raw: "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"}}},
		{"BOM later is data", "data: a\n\n\xEF\xBB\xBFdata: b\n\n", 0, []rec{
			{Raw: "data: a\n\n", Data: ptr("a")},
			{Raw: "\xEF\xBB\xBFdata: b\n\n"},
		}},
		{"partial BOM", "\xEF\xBBdata: a\n\n", 0, []rec{{Raw: "\xEF\xBBdata: a\n\n"}}},
		{"partial BOM at EOF", "\xEF\xBB", 0, []rec{{Raw: "\xEF\xBB", Err: errEOF}}},
		{"only BOM", "\xEF\xBB\xBF", 0, []rec{{Raw: "\xEF\xBB\xBF", Err: errEOF}}},
		{"bytes are not decoded", "data: \xff\xfe\n\n", 0, []rec{{Raw: "data: \xff\xfe\n\n", Data: ptr("\xff\xfe")}}},
		{"NUL in data kept", "data: a\x00b\n\n", 0, []rec{{Raw: "data: a\x00b\n\n", Data: ptr("a\x00b")}}},
		{"EOF inside event", "data: a\n\ndata: b\n", 0, []rec{
			{Raw: "data: a\n\n", Data: ptr("a")},
			{Raw: "data: b\n", Err: errEOF},
		}},
		{"EOF inside line", "data: a", 0, []rec{{Raw: "data: a", Err: errEOF}}},
		{"EOF after CR of line", "data: a\r", 0, []rec{{Raw: "data: a\r", Err: errEOF}}},
		{"limit exact", "data: a\n\n", 9, []rec{{Raw: "data: a\n\n", Data: ptr("a")}}},
		{"limit exceeded by one", "data: a\n\n", 8, []rec{{Err: errTooLarge}}},
		{"limit counts CR of final CRLF only", "data: a\r\n\r\n", 10, []rec{{Raw: "data: a\r\n\r\n", Data: ptr("a")}}},
		{"limit with CRLF exceeded", "data: a\r\n\r\n", 9, []rec{{Err: errTooLarge}}},
		{"limit after good events", "data: a\n\ndata: bbbbbbbb\n\n", 9, []rec{
			{Raw: "data: a\n\n", Data: ptr("a")},
			{Err: errTooLarge},
		}},
		{"limit on partial event at EOF", "data: abc", 9, []rec{{Err: errTooLarge}}},
		{"partial event under limit at EOF", "data: ab", 9, []rec{{Raw: "data: ab", Err: errEOF}}},
		{"limit counts BOM", "\xEF\xBB\xBFdata: a\n\n", 11, []rec{{Err: errTooLarge}}},
		{"limit of one", "\n\n\r\n", 1, []rec{{Raw: "\n"}, {Raw: "\n"}, {Raw: "\r\n"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := jsonLines(tc.want)
			check := func(how string, got []rec) {
				t.Helper()
				if d := firstDiff(jsonLines(normalize(got)), want); d != "" {
					t.Errorf("%s: %s", how, d)
				}
			}
			check("whole", collect(t, strings.NewReader(tc.in), tc.limit))
			check("one byte", collect(t, iotest.OneByteReader(strings.NewReader(tc.in)), tc.limit))
			check("oracle", oracle([]byte(tc.in), tc.limit))
		})
	}
}

// countingReader serves a stream from a list of reads and counts Read calls.
type countingReader struct {
	reads [][]byte
	calls int
	err   error // returned once the reads are used up; io.EOF when nil
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.calls++
	if len(c.reads) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p, c.reads[0])
	if n == len(c.reads[0]) {
		c.reads = c.reads[1:]
	} else {
		c.reads[0] = c.reads[0][n:]
	}
	return n, nil
}

func reads(parts ...string) [][]byte {
	var out [][]byte
	for _, p := range parts {
		out = append(out, []byte(p))
	}
	return out
}

// TestNextDoesNotWait checks that a block is returned as soon as its blank line is
// buffered, without another Read, including a CR-terminated one.
func TestNextDoesNotWait(t *testing.T) {
	r := &countingReader{reads: reads("data: a\n\ndata: b\r\n\r", "\ndata: c\r\r", "\n")}
	s := sse.NewScanner(r, 0)
	step := func(wantRaw string, wantCalls int) {
		t.Helper()
		ev, err := s.Next()
		if err != nil || string(ev.Raw) != wantRaw || r.calls != wantCalls {
			t.Fatalf("Next = (%q, %v) after %d reads, want (%q, nil) after %d", ev.Raw, err, r.calls, wantRaw, wantCalls)
		}
	}
	step("data: a\n\n", 1)
	step("data: b\r\n\r", 1) // the CR ends the block; the LF has not arrived
	step("\n", 2)            // the LF of that CRLF, alone
	step("data: c\r\r", 2)
	step("\n", 3)
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("err = %v, want io.EOF", err)
	}
}

// TestReady checks that Ready reports a complete buffered block, which the
// next Next returns without reading, and never reads itself.
func TestReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads []string
		want  []bool // Ready before each Next, until io.EOF
	}{
		{"two blocks in one read", []string{"data: a\n\ndata: b\n\n"}, []bool{false, true, false}},
		{"the second block cut", []string{"data: a\n\ndata: b", "\n\n"}, []bool{false, false, false}},
		{"a CR ends the block", []string{"data: a\n\ndata: b\r\r"}, []bool{false, true, false}},
		{"the LF of a CRLF comes later", []string{"data: a\r\n\r", "\n"}, []bool{false, false, false}},
		{"comments are blocks", []string{": ping\n\ndata: a\n\n"}, []bool{false, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{reads: reads(tc.reads...)}
			s := sse.NewScanner(r, 0)
			for i, want := range tc.want {
				calls := r.calls
				if got := s.Ready(); got != want || r.calls != calls {
					t.Fatalf("Ready before Next %d = %v after %d reads, want %v and none", i, got, r.calls-calls, want)
				}
				if _, err := s.Next(); err != nil && (err != io.EOF || i != len(tc.want)-1) {
					t.Fatalf("Next %d: %v", i, err)
				}
				if want && r.calls != calls {
					t.Fatalf("Next %d read after Ready", i)
				}
			}
			if s.Ready() {
				t.Fatal("Ready after the end")
			}
		})
	}
}

// TestCRLFSplitAcrossReadsInsideBlock checks that CR at the end of one read and LF
// at the start of the next is one line end inside a block.
func TestCRLFSplitAcrossReadsInsideBlock(t *testing.T) {
	r := &countingReader{reads: reads("data: a\r", "\ndata: b\r", "\n\r\n")}
	got := collect(t, r, 0)
	want := []rec{{Raw: "data: a\r\ndata: b\r\n\r\n", Data: ptr("a\nb")}}
	if d := firstDiff(jsonLines(got), jsonLines(want)); d != "" {
		t.Fatal(d)
	}
}

// endlessReader returns the same byte forever and counts bytes read.
type endlessReader struct {
	b byte
	n int
}

func (e *endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b
	}
	e.n += len(p)
	return len(p), nil
}

// TestHugeLineBounded checks that a line with no end fails after reading about
// limit bytes instead of buffering without bound.
func TestHugeLineBounded(t *testing.T) {
	for _, limit := range []int{1, 100, 64 << 10, 0} {
		r := &endlessReader{b: 'a'}
		s := sse.NewScanner(r, limit)
		_, err := s.Next()
		if err != sse.ErrEventTooLarge {
			t.Fatalf("limit %d: err = %v, want ErrEventTooLarge", limit, err)
		}
		eff := limit
		if eff <= 0 {
			eff = sse.DefaultLimit
		}
		if r.n > eff+8<<10 {
			t.Errorf("limit %d: read %d bytes before failing", limit, r.n)
		}
		if s.Buffered() > eff+8<<10 {
			t.Errorf("limit %d: Buffered() = %d", limit, s.Buffered())
		}
	}
}

// TestHugeEventManyLines checks the limit applies to all lines of one event.
func TestHugeEventManyLines(t *testing.T) {
	in := strings.Repeat("data: xxxxxxxx\n", 10000) + "\n"
	got := collect(t, strings.NewReader(in), 1000)
	if len(got) != 1 || got[0].Err != errTooLarge {
		t.Fatalf("got %v, want ErrEventTooLarge", got)
	}
	got = collect(t, strings.NewReader(in), len(in))
	if len(got) != 1 || got[0].Err != "" || len(*got[0].Data) != 10000*9-1 {
		t.Fatalf("at limit: got %d recs", len(got))
	}
}

var errBoom = errors.New("boom")

// TestReaderError checks that a reader error comes after the complete blocks,
// unwrapped, with the pending bytes.
func TestReaderError(t *testing.T) {
	r := &countingReader{reads: reads("data: a\n\ndata: b\n\ndata: partial"), err: errBoom}
	s := sse.NewScanner(r, 0)
	for _, want := range []string{"a", "b"} {
		ev, err := s.Next()
		if err != nil || string(ev.Data) != want {
			t.Fatalf("Next = (%q, %v), want %q", ev.Data, err, want)
		}
	}
	ev, err := s.Next()
	if !errors.Is(err, errBoom) || string(ev.Raw) != "data: partial" {
		t.Fatalf("Next = (%q, %v), want partial bytes and errBoom", ev.Raw, err)
	}
	if _, err := s.Next(); err != errBoom {
		t.Fatalf("error not sticky: %v", err)
	}
}

// dataErrReader returns its data together with an error in one Read.
type dataErrReader struct {
	data []byte
	err  error
	done bool
}

func (d *dataErrReader) Read(p []byte) (int, error) {
	if d.done {
		return 0, d.err
	}
	d.done = true
	return copy(p, d.data), d.err
}

// TestDataWithError checks that bytes returned together with an error are used.
func TestDataWithError(t *testing.T) {
	for _, e := range []error{io.EOF, errBoom} {
		s := sse.NewScanner(&dataErrReader{data: []byte("data: a\n\n: c\n\n"), err: e}, 0)
		if ev, err := s.Next(); err != nil || string(ev.Data) != "a" {
			t.Fatalf("%v: first = (%q, %v)", e, ev.Data, err)
		}
		if ev, err := s.Next(); err != nil || string(ev.Comment) != "c" {
			t.Fatalf("%v: second = (%q, %v)", e, ev.Raw, err)
		}
		if _, err := s.Next(); err != e {
			t.Fatalf("end = %v, want %v", err, e)
		}
	}
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestNoProgress checks that a reader that keeps returning (0, nil) ends the scan.
func TestNoProgress(t *testing.T) {
	s := sse.NewScanner(emptyReader{}, 0)
	if _, err := s.Next(); err != io.ErrNoProgress {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

// TestResetAndBuffered checks Reset (BOM rule again, error cleared, buffers kept)
// and Buffered.
func TestResetAndBuffered(t *testing.T) {
	s := sse.NewScanner(strings.NewReader("data: a\n\ndata: b\n\ndata: c"), 0)
	if s.Buffered() != 0 {
		t.Fatalf("Buffered before Next = %d", s.Buffered())
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if got := s.Buffered(); got != len("data: b\n\ndata: c") {
		t.Fatalf("Buffered = %d", got)
	}
	s.Next()
	if ev, err := s.Next(); err != io.ErrUnexpectedEOF || string(ev.Raw) != "data: c" || s.Buffered() != 0 {
		t.Fatalf("Next = (%q, %v), Buffered %d", ev.Raw, err, s.Buffered())
	}
	s.Reset(strings.NewReader("\xEF\xBB\xBFdata: d\n\n"))
	ev, err := s.Next()
	if err != nil || string(ev.Data) != "d" || !ev.HasData {
		t.Fatalf("after Reset: (%q, %v)", ev.Data, err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("after Reset: end %v", err)
	}
	// Reset after ErrEventTooLarge.
	s = sse.NewScanner(strings.NewReader("data: too long\n\n"), 5)
	if _, err := s.Next(); err != sse.ErrEventTooLarge {
		t.Fatal(err)
	}
	s.Reset(strings.NewReader("d\n\n"))
	if ev, err := s.Next(); err != nil || string(ev.Raw) != "d\n\n" {
		t.Fatalf("after Reset: (%q, %v)", ev.Raw, err)
	}
}

// TestSlicesCapped checks that appending to a returned slice cannot overwrite the
// bytes of a later block.
func TestSlicesCapped(t *testing.T) {
	s := sse.NewScanner(strings.NewReader("event: t\nid: i\n: c\ndata: a\n\ndata: b\ndata: c\n\ndata: z\n\n"), 0)
	ev, _ := s.Next()
	for _, b := range [][]byte{ev.Raw, ev.Data, ev.Type, ev.ID, ev.Comment} {
		_ = append(b, "XXXXXXXXXXXXXXXXXXXX"...)
	}
	ev, _ = s.Next()
	_ = append(ev.Data, "XXXXXXXXXXXX"...)
	ev, err := s.Next()
	if err != nil || string(ev.Raw) != "data: z\n\n" {
		t.Fatalf("got (%q, %v)", ev.Raw, err)
	}
}

// TestLongStreamCompaction runs many events through small odd-sized reads so the
// buffer is compacted and refilled with blocks straddling every position.
func TestLongStreamCompaction(t *testing.T) {
	var in bytes.Buffer
	var want []rec
	for i := range 3000 {
		var raw string
		d := strings.Repeat("y", i%700)
		switch i % 3 {
		case 0:
			raw = "data: " + d + "\n\n"
		case 1:
			raw = "data: " + d + "\r\ndata: z\r\n\r\n"
			d += "\nz"
		case 2:
			raw = ": c\rdata: " + d + "\r\r"
		}
		in.WriteString(raw)
		r := rec{Raw: raw, Data: ptr(d)}
		if i%3 == 2 {
			r.Comment, r.Comments = ptr("c"), 1
		}
		want = append(want, r)
	}
	for _, size := range []int{1, 7, 100, 1000, 4095, 4097, 1 << 20} {
		got := collect(t, &chunkReader{in: in.Bytes(), chunks: repeat(size, in.Len())}, 0)
		if d := firstDiff(jsonLines(normalize(got)), jsonLines(want)); d != "" {
			t.Fatalf("reads of %d: %s", size, d)
		}
	}
}

func repeat(size, total int) []int {
	out := make([]int, total/size+1)
	for i := range out {
		out[i] = size
	}
	return out
}

// timeoutReader returns a deadline error at the given reads, data otherwise.
type timeoutReader struct {
	chunks []string // "" = a timeout
}

type deadlineErr struct{}

func (deadlineErr) Error() string { return "i/o timeout" }
func (deadlineErr) Timeout() bool { return true }

func (r *timeoutReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	if c == "" {
		return 0, deadlineErr{}
	}
	return copy(p, c), nil
}

// TestTimeoutIsTransient checks that a read deadline between or inside
// blocks is reported without ending the stream or losing bytes.
func TestTimeoutIsTransient(t *testing.T) {
	r := &timeoutReader{chunks: []string{"data: a\n\n", "", "data: b", "", "\n\n", ""}}
	s := sse.NewScanner(r, 0)
	var got []string
	timeouts, pendingAtTimeout := 0, []int{}
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var te interface{ Timeout() bool }
			if !errors.As(err, &te) {
				t.Fatalf("error %v", err)
			}
			timeouts++
			pendingAtTimeout = append(pendingAtTimeout, s.Buffered())
			continue
		}
		got = append(got, string(ev.Data))
	}
	if strings.Join(got, ",") != "a,b" || timeouts != 3 {
		t.Fatalf("events %q, timeouts %d", got, timeouts)
	}
	// Between blocks nothing is pending; inside "data: b" it is.
	if pendingAtTimeout[0] != 0 || pendingAtTimeout[1] == 0 || pendingAtTimeout[2] != 0 {
		t.Errorf("pending bytes at the timeouts %v, want [0 >0 0]", pendingAtTimeout)
	}
}

// TestNextIntoOverwrites: NextInto leaves nothing of the event it was given
// (a relay reuses one Event for a whole stream), at a block and at the end.
func TestNextIntoOverwrites(t *testing.T) {
	s := sse.NewScanner(strings.NewReader("id: 7\n: note\nevent: e\nretry: 5\ndata: a\n\ndata: b\n\n"), 0)
	var ev sse.Event
	for i, want := range []sse.Event{
		{Raw: []byte("id: 7\n: note\nevent: e\nretry: 5\ndata: a\n\n"), Data: []byte("a"), HasData: true, Type: []byte("e"), ID: []byte("7"), HasID: true, Retry: 5, Comment: []byte("note"), Comments: 1},
		{Raw: []byte("data: b\n\n"), Data: []byte("b"), HasData: true, Retry: -1},
		{Retry: -1},
	} {
		err := s.NextInto(&ev)
		if (err == io.EOF) != (i == 2) || err != nil && err != io.EOF {
			t.Fatalf("block %d: %v", i, err)
		}
		if !reflect.DeepEqual(normal(ev), normal(want)) {
			t.Errorf("block %d:\n got %+v\nwant %+v", i, ev, want)
		}
	}
}

// normal makes empty slices nil, so that events compare by content.
func normal(ev sse.Event) sse.Event {
	for _, b := range []*[]byte{&ev.Raw, &ev.Data, &ev.Type, &ev.ID, &ev.Comment} {
		if len(*b) == 0 {
			*b = nil
		}
	}
	return ev
}
