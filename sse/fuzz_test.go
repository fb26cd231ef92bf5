package sse_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ttftlens/ttftlens/sse"
)

// FuzzScanner checks, for arbitrary input, limit and read splits, that the Scanner
// does not panic, agrees with the naive oracle (so results do not depend on how
// the input was split), respects the limit, and preserves every byte.
func FuzzScanner(f *testing.F) {
	seeds := []struct {
		in    string
		seed  uint64
		limit uint16
	}{
		{"data: a\n\n", 1, 0},                                            // simplest event
		{"data: a\r\n\r\ndata: b\r\n\r\n", 2, 0},                         // CRLF pairs split by reads
		{"data: a\r\rdata: b\r\r\n", 3, 0},                               // CR-only, then a CRLF blank line
		{"\xEF\xBB\xBFdata: bom\n\n", 4, 0},                              // BOM, split inside it
		{"\xEF\xBB", 5, 0},                                               // partial BOM at EOF
		{": ping\n\n:\n\n\n", 6, 0},                                      // comments and lone blank lines
		{"event: e\nid: 1\nretry: 10\ndata: x\ndata: y\n\n", 7, 0},       // every field, multi-line data
		{"id: a\x00b\nretry: 1a\nretry: 99999999999999999999\n\n", 8, 0}, // ignored id and retries
		{"data: 0123456789\n\n", 9, 10},                                  // over a small limit
		{"data: 0123\r\n\r\n", 10, 11},                                   // final CRLF exactly at the limit
		{"data: partial", 11, 0},                                         // EOF inside an event
		{"data: a\r", 12, 0},                                             // EOF after a CR
		{"\r\n\r\n\r\r\n\n\r", 13, 1},                                    // only line ends, limit one
		{"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n", 14, 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.in), s.seed, s.limit)
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64, limit16 uint16) {
		limit := int(limit16)
		want := jsonLines(oracle(in, limit))
		if d := firstDiff(jsonLines(normalize(collect(t, bytes.NewReader(in), limit))), want); d != "" {
			t.Fatalf("whole read vs oracle: %s", d)
		}
		if d := firstDiff(jsonLines(normalize(collect(t, iotest.OneByteReader(bytes.NewReader(in)), limit))), want); d != "" {
			t.Fatalf("one byte per read vs oracle: %s", d)
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var chunks []int
		for n := 0; n < len(in); {
			c := 1 + rng.IntN(16)
			if rng.IntN(8) == 0 {
				c = rng.IntN(4096) // occasionally large, or an empty read
			}
			chunks = append(chunks, c)
			n += c
		}
		got := collect(t, &chunkReader{in: in, chunks: chunks}, limit)
		if d := firstDiff(jsonLines(normalize(got)), want); d != "" {
			t.Fatalf("reads %v vs oracle: %s", chunks, d)
		}
		ready := collectReady(t, &chunkReader{in: in, chunks: chunks}, limit)
		if d := firstDiff(jsonLines(normalize(ready)), want); d != "" {
			t.Fatalf("reads %v, Ready before every Next, vs oracle: %s", chunks, d)
		}

		eff := limit
		if eff <= 0 {
			eff = sse.DefaultLimit
		}
		var raw strings.Builder
		for i, r := range got {
			if len(r.Raw) > eff && !(len(r.Raw) == eff+1 && strings.HasSuffix(r.Raw, "\r\n")) {
				t.Fatalf("block %d is %d bytes, limit %d", i, len(r.Raw), eff)
			}
			raw.WriteString(r.Raw)
		}
		end := ""
		if len(got) > 0 {
			end = got[len(got)-1].Err
		}
		switch end {
		case "", errEOF:
			if raw.String() != string(in) {
				t.Fatalf("concatenated Raw %q differs from input %q", raw.String(), in)
			}
		case errTooLarge:
			if !strings.HasPrefix(string(in), raw.String()) {
				t.Fatalf("concatenated Raw %q is not a prefix of input %q", raw.String(), in)
			}
		default:
			t.Fatalf("unexpected error %q", end)
		}
	})
}

// FuzzAppendEvent checks that any type and data written by AppendEvent read back
// as one event with the type (up to its first line end) and the data (line ends
// turned into LF).
func FuzzAppendEvent(f *testing.F) {
	f.Add([]byte("delta"), []byte(`{"content":"Hi"}`)) // typical
	f.Add([]byte(""), []byte(""))                      // empty data is still an event
	f.Add([]byte("a\nb"), []byte("x\r\ny\rz\n"))       // line ends in both
	f.Add([]byte(""), []byte(" leading space\n"))      // space kept
	f.Fuzz(func(t *testing.T, typ, data []byte) {
		b := sse.AppendEvent(nil, typ, data)
		s := sse.NewScanner(bytes.NewReader(b), len(b)+1)
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		wantType, _, _ := strings.Cut(strings.ReplaceAll(string(typ), "\r", "\n"), "\n")
		wantData := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
		if !ev.HasData || string(ev.Type) != wantType || string(ev.Data) != wantData || string(ev.Raw) != string(b) {
			t.Fatalf("%q read back as type %q data %q, want %q %q", b, ev.Type, ev.Data, wantType, wantData)
		}
		if _, err := s.Next(); err.Error() != "EOF" {
			t.Fatalf("%q: more than one block (%v)", b, err)
		}
	})
}
