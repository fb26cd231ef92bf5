package engines

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ttftlens/ttftlens/sse"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/lines")

type lineResult struct {
	raw, line string
	err       error
}

// collectLines runs a LineScanner to its error.
func collectLines(r io.Reader, limit int) []lineResult {
	sc := NewLineScanner(r, limit)
	var out []lineResult
	for i := 0; i < 1<<20; i++ {
		raw, line, err := sc.Next()
		out = append(out, lineResult{string(raw), string(line), err})
		if err != nil {
			// Sticky.
			if raw2, line2, err2 := sc.Next(); err2 != err || raw2 != nil || line2 != nil {
				out = append(out, lineResult{"STICKY?", "", err2})
			}
			return out
		}
	}
	panic("no end")
}

// oracleLines is the naive reading of the LineScanner contract.
func oracleLines(in []byte, limit int) []lineResult {
	if limit <= 0 {
		limit = DefaultLineLimit
	}
	var out []lineResult
	for len(in) > 0 {
		i := bytes.IndexByte(in, '\n')
		var raw []byte
		if i < 0 {
			raw, in = in, nil
			if len(raw) > limit {
				return append(out, lineResult{err: sse.ErrEventTooLarge})
			}
		} else {
			raw, in = in[:i+1], in[i+1:]
			if i > limit {
				return append(out, lineResult{err: sse.ErrEventTooLarge})
			}
		}
		out = append(out, lineResult{string(raw), string(trimJSONSpace(raw)), nil})
	}
	return append(out, lineResult{err: io.EOF})
}

func formatLines(rs []lineResult) string {
	var b strings.Builder
	for _, r := range rs {
		if r.err != nil {
			fmt.Fprintf(&b, "err %v\n", r.err)
			continue
		}
		fmt.Fprintf(&b, "raw %q line %q\n", r.raw, r.line)
	}
	return b.String()
}

// chunkedReader returns its input in the given read sizes (0 = an empty read).
type chunkedReader struct {
	in     []byte
	chunks []int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := len(c.in)
	if len(c.chunks) > 0 {
		n, c.chunks = min(c.chunks[0], n), c.chunks[1:]
	}
	n = copy(p, c.in[:n])
	c.in = c.in[n:]
	return n, nil
}

// TestLineScannerGolden: testdata/lines/*.ndjson split as their .golden
// files say, whatever the read sizes.
func TestLineScannerGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/lines/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got := formatLines(collectLines(bytes.NewReader(in), 0))
			golden := strings.TrimSuffix(f, ".ndjson") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("whole read:\n got:\n%s\nwant:\n%s", got, want)
			}
			if o := formatLines(oracleLines(in, 0)); o != string(want) {
				t.Errorf("oracle disagrees with the golden file:\n%s", o)
			}
			for name, r := range map[string]io.Reader{
				"one byte":   iotest.OneByteReader(bytes.NewReader(in)),
				"half":       iotest.HalfReader(bytes.NewReader(in)),
				"data+EOF":   iotest.DataErrReader(bytes.NewReader(in)),
				"3 and zero": &chunkedReader{in: in, chunks: []int{3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3}},
			} {
				if g := formatLines(collectLines(r, 0)); g != string(want) {
					t.Errorf("%s reads:\n got:\n%s\nwant:\n%s", name, g, want)
				}
			}
		})
	}
}

func TestLineScannerLimit(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"abcd\n", 4, `raw "abcd\n" line "abcd"` + "\nerr EOF\n"},
		{"abcde\n", 4, "err " + sse.ErrEventTooLarge.Error() + "\n"},
		{"ab\nabcde\nab\n", 4, `raw "ab\n" line "ab"` + "\nerr " + sse.ErrEventTooLarge.Error() + "\n"},
		{"abcde", 4, "err " + sse.ErrEventTooLarge.Error() + "\n"},
		{"abcd", 4, `raw "abcd" line "abcd"` + "\nerr EOF\n"},
		{"\n\n", 0, `raw "\n" line ""` + "\n" + `raw "\n" line ""` + "\nerr EOF\n"},
	}
	for _, tc := range tests {
		for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
			if got := formatLines(collectLines(r, tc.limit)); got != tc.want {
				t.Errorf("%q limit %d:\n got %s\nwant %s", tc.in, tc.limit, got, tc.want)
			}
		}
	}
	// A huge line is refused after about limit bytes, not read whole.
	const limit = 1 << 10
	src := &countingReader{r: io.MultiReader(strings.NewReader(`{"response":"`), neverEnding('x'))}
	sc := NewLineScanner(src, limit)
	if _, _, err := sc.Next(); err != sse.ErrEventTooLarge {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
	if src.n > limit+lineSlack+lineInitialBuf {
		t.Errorf("read %d bytes before refusing a line over %d", src.n, limit)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// TestLineScannerReadErrors: a cut body's error comes after the complete
// lines, with the unfinished line's bytes; errors are sticky; Reset clears.
func TestLineScannerReadErrors(t *testing.T) {
	cut := io.MultiReader(strings.NewReader("{\"a\":1}\n{\"b\""), iotest.ErrReader(io.ErrUnexpectedEOF))
	sc := NewLineScanner(cut, 0)
	raw, line, err := sc.Next()
	if string(raw) != "{\"a\":1}\n" || string(line) != `{"a":1}` || err != nil {
		t.Fatalf("first: %q %q %v", raw, line, err)
	}
	raw, line, err = sc.Next()
	if string(raw) != `{"b"` || line != nil || err != io.ErrUnexpectedEOF {
		t.Fatalf("second: %q %q %v, want the partial line with io.ErrUnexpectedEOF", raw, line, err)
	}
	if raw, _, err = sc.Next(); raw != nil || err != io.ErrUnexpectedEOF {
		t.Fatalf("not sticky: %q %v", raw, err)
	}
	sc.Reset(strings.NewReader("{}\n"))
	if raw, _, err = sc.Next(); string(raw) != "{}\n" || err != nil {
		t.Fatalf("after Reset: %q %v", raw, err)
	}
	// A reader stuck returning (0, nil).
	sc.Reset(&chunkedReader{in: []byte("x"), chunks: make([]int, 200)})
	if _, _, err = sc.Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("stuck reader: %v, want io.ErrNoProgress", err)
	}
	// A reader claiming more than it was given.
	sc.Reset(liar{})
	if _, _, err = sc.Next(); err == nil || err == io.EOF {
		t.Fatalf("lying reader: %v", err)
	}
}

type liar struct{}

func (liar) Read(p []byte) (int, error) { return len(p) + 1, nil }

// TestLineScannerRelay: an Ollama stream split by the scanner and read by
// the Ollama reader gives every line back byte for byte.
func TestLineScannerRelay(t *testing.T) {
	tr := loadTranscript(t, "testdata/ollama/chat_stream.txt")
	sc := NewLineScanner(iotest.HalfReader(bytes.NewReader(tr.body)), 512)
	var out bytes.Buffer
	var r OllamaReader
	done := false
	for {
		raw, line, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(raw)
		if len(line) > 0 {
			done = r.Event(line, nil).Done || done
		}
	}
	if !bytes.Equal(out.Bytes(), tr.body) {
		t.Errorf("forwarded bytes differ from the input")
	}
	if !done {
		t.Errorf("no done line")
	}
}

func FuzzLineScanner(f *testing.F) {
	seeds := []struct {
		in    string
		seed  uint64
		limit uint16
	}{
		{"{\"a\":1}\n{\"b\":2}\n", 1, 0},
		{"{\"a\":1}\r\n\r\n  \n{\"b\":2}\r\n", 2, 0},
		{"{\"done\":true}", 3, 0},
		{"\n\n\n", 4, 1},
		{"abcdefgh\nabc\n", 5, 4},
		{"abcd\nabcd", 6, 4},
		{"", 7, 0},
		{"{\"model\":\"llama3.2\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n", 8, 16},
	}
	for _, s := range seeds {
		f.Add([]byte(s.in), s.seed, s.limit)
	}
	files, _ := filepath.Glob("testdata/ollama/public_*.txt")
	for i, name := range files {
		f.Add(loadTranscript(f, name).body, uint64(100+i), uint16(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64, limit16 uint16) {
		limit := int(limit16)
		want := formatLines(oracleLines(in, limit))
		if got := formatLines(collectLines(bytes.NewReader(in), limit)); got != want {
			t.Fatalf("whole read:\n got %s\nwant %s", got, want)
		}
		if got := formatLines(collectLines(iotest.OneByteReader(bytes.NewReader(in)), limit)); got != want {
			t.Fatalf("one byte reads:\n got %s\nwant %s", got, want)
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var chunks []int
		for n := 0; n < len(in); {
			c := rng.IntN(17)
			if rng.IntN(8) == 0 {
				c = rng.IntN(4096)
			}
			chunks = append(chunks, c)
			n += c
		}
		if got := formatLines(collectLines(&chunkedReader{in: in, chunks: chunks}, limit)); got != want {
			t.Fatalf("random reads %v:\n got %s\nwant %s", chunks, got, want)
		}
	})
}
