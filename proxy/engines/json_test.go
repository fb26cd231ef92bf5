package engines

import (
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"
	"github.com/valyala/fastjson/fastfloat"
)

// jsonCases are documents whose parse the readers' parser must agree on
// with fastjson, whose rules it keeps: valid or not, and every value.
var jsonCases = []string{
	openaiContent, openaiRole, vllmUsage, llamacppFinal, toolCallArgs, escapedContent, wholeChat, tgiError,
	`{}`, `[]`, ` {"a" : [ 1 , 2.5e3 , -0 , "x" ] , "b" : { } } `, `"s"`, `1`, `true`, `false`, `null`,
	`{"a":1,}`, `[1,]`, `{"a" 1}`, `{"a":1 "b":2}`, `[1 2]`, `{"a":1]`, `[1}`, `{`, `[`, `{"a":`, `"abc`, ``, `  `,
	`{"a":1} x`, `{"a":1}{}`, `tru`, `nul`, `falsey`, `nan`, `NaN`, `-inf`, `+Inf`, `[inf, -nan]`, `1.2.3`, `--1`, `1e`, `+1`,
	`{"k\u0065y":1, "key":2}`, `{"key":1, "k\u0065y":2}`, `{"\"":"\\"}`, `{"a":"\"\\\"\\\\"}`,
	`"\ud83d\ude00 \u00e9 \uZZZZ \u12 \ud83d x \q \/ \b\f\n\r\t"`, `"a\\"`, `"a\\\"b"`, `"\"`,
	`{"a":"line
break"}`, "\t{\"a\":\r\n1}\n",
	strings.Repeat("[", 299) + strings.Repeat("]", 299), strings.Repeat("[", 300) + strings.Repeat("]", 300),
	strings.Repeat("[", 299) + "1" + strings.Repeat("]", 299), strings.Repeat("[", 300) + "1" + strings.Repeat("]", 300),
	`{"a":{"b":{"c":[{"d":[1,{"e":"deep"}]}]}}}`,
	`{"n":[9223372036854775807, 9223372036854775808, -9223372036854775808, 12.0, 1e3, 007, 0x1F]}`,
}

func TestJSONParserMatchesFastjson(t *testing.T) {
	for _, doc := range jsonCases {
		t.Run(fmt.Sprintf("%.40q", doc), func(t *testing.T) { checkAgainstFastjson(t, []byte(doc)) })
	}
	// And every event in the engines' captured streams.
	err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))
			if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
				checkAgainstFastjson(t, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzJSONParser(f *testing.F) {
	for _, doc := range jsonCases {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkAgainstFastjson(t, doc) })
}

// checkAgainstFastjson parses doc with both parsers (the ours twice, the
// second time reusing its memory) and compares the outcome value by value.
func checkAgainstFastjson(t *testing.T, doc []byte) {
	t.Helper()
	var fp fastjson.Parser
	fv, ferr := fp.ParseBytes(doc)
	var p jsonParser
	for round := range 2 {
		v, err := p.parse(doc)
		if (err == nil) != (ferr == nil) {
			t.Fatalf("%q: parsed = %v, fastjson's = %v (%v)", doc, err == nil, ferr == nil, ferr)
		}
		if err != nil {
			return
		}
		if got, want := dumpJSON(v), dumpFastjson(fv); got != want {
			t.Fatalf("%q, round %d:\n got %s\nwant %s", doc, round, got, want)
		}
	}
}

// dumpJSON writes out every value the readers can see: types, keys after
// unescaping, strings, numbers' text and what Int, Float64 and GetInt make
// of them.
func dumpJSON(v *jsonValue) string {
	var b strings.Builder
	var walk func(v *jsonValue)
	walk = func(v *jsonValue) {
		switch v.Type() {
		case jsonObject:
			b.WriteString("{")
			v.member("\x00") // unescapes the keys, as a lookup that misses does
			for _, m := range v.o {
				fmt.Fprintf(&b, "%q:", m.k)
				if v.Get(string(m.k)) != nil {
					walk(v.Get(string(m.k))) // the first member of that name
				}
				b.WriteString(",")
			}
			b.WriteString("}")
		case jsonArray:
			b.WriteString("[")
			for _, e := range v.GetArray() {
				walk(e)
				b.WriteString(",")
			}
			b.WriteString("]")
		case jsonString:
			fmt.Fprintf(&b, "s%q", v.GetStringBytes())
		case jsonNumber:
			n, nerr := v.Int()
			x, xerr := v.Float64()
			fmt.Fprintf(&b, "n(%s %d/%v %v/%v %d)", v.s, n, nerr == nil, x, xerr == nil, v.GetInt())
		case jsonTrue:
			b.WriteString("true")
		case jsonFalse:
			b.WriteString("false")
		case jsonNull:
			b.WriteString("null")
		}
	}
	walk(v)
	return b.String()
}

func dumpFastjson(v *fastjson.Value) string {
	var b strings.Builder
	var walk func(v *fastjson.Value)
	walk = func(v *fastjson.Value) {
		switch v.Type() {
		case fastjson.TypeObject:
			b.WriteString("{")
			v.GetObject().Visit(func(k []byte, _ *fastjson.Value) {
				fmt.Fprintf(&b, "%q:", k)
				if e := v.Get(string(k)); e != nil {
					walk(e)
				}
				b.WriteString(",")
			})
			b.WriteString("}")
		case fastjson.TypeArray:
			b.WriteString("[")
			for _, e := range v.GetArray() {
				walk(e)
				b.WriteString(",")
			}
			b.WriteString("]")
		case fastjson.TypeString:
			fmt.Fprintf(&b, "s%q", v.GetStringBytes())
		case fastjson.TypeNumber:
			n, nerr := v.Int()
			x, xerr := v.Float64()
			fmt.Fprintf(&b, "n(%s %d/%v %v/%v %d)", v.MarshalTo(nil), n, nerr == nil, x, xerr == nil, v.GetInt())
		case fastjson.TypeTrue:
			b.WriteString("true")
		case fastjson.TypeFalse:
			b.WriteString("false")
		case fastjson.TypeNull:
			b.WriteString("null")
		}
	}
	walk(v)
	return b.String()
}

// BenchmarkEventParse: an OpenAI chunk parsed by the readers' parser and
// by fastjson (BENCHMARKS.md).
func BenchmarkEventParse(b *testing.B) {
	data := []byte(openaiContent)
	b.Run("readers", func(b *testing.B) {
		var p jsonParser
		for b.Loop() {
			if _, err := p.parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var p fastjson.Parser
		for b.Loop() {
			if _, err := p.ParseBytes(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseNumber: a long mantissa is cut where fastfloat would give the
// number to strconv, and the duration read from it is the whole number's.
func TestParseNumber(t *testing.T) {
	for _, tc := range []struct{ in, short string }{
		{"0.12345678901234567", "0.12345678901234"},
		{"-123.45678901234567", "-123.456789012345"},
		{"86399.123456789012345", "86399.1234567890"},
		{"0.12345678901234", "0.12345678901234"}, // 16 characters: whole
		{"9.876543210987654e-1", "9.87654321098765"},
		{"9.876543210987654E+2", "9.87654321098765"},
		{"1.2345678901234567e400", "1.23456789012345"},
		{"0.0000000000000000001234e20", "0.00000000000000"}, // zeros first and an exponent: read whole
		{"12345678901234567.5", "12345678901234567.5"},      // a long integer part: whole
		{"5", "5"},
		{"", ""},
	} {
		mant := tc.in
		if i := strings.IndexAny(mant, "eE"); i >= 0 {
			mant = mant[:i]
		}
		if got := string(shortMantissa([]byte(mant))); got != tc.short {
			t.Errorf("shortMantissa(%q) = %q, want %q", mant, got, tc.short)
		}
		whole, err1 := fastfloat.Parse(tc.in) // strconv's slow path, for these
		got, err2 := parseNumber([]byte(tc.in))
		if (err1 == nil) != (err2 == nil) {
			t.Errorf("%q: fastfloat %v, parseNumber %v", tc.in, err1, err2)
			continue
		}
		for _, unit := range []time.Duration{time.Second, time.Millisecond} {
			w, ok1 := toDur(whole, unit)
			c, ok2 := toDur(got, unit)
			if ok1 != ok2 || w != c {
				t.Errorf("%q in %v: %v (%v) whole, %v (%v) read", tc.in, unit, w, ok1, c, ok2)
			}
		}
	}
}

// TestParseWithoutCopy: parseFloat and parseInt read what fastfloat reads,
// zeros and text that is not a number included.
func TestParseWithoutCopy(t *testing.T) {
	for _, in := range []string{"0", "-0", "0.0", "-0.000", "0.", "00", "0e0", "0e", ".0", "-", "", "1", "-12", "1.5", "1e3", "1e-400", "nan", "inf", "0x1", "12a", "9223372036854775808"} {
		wantF, errF := fastfloat.Parse(in)
		gotF, err := parseFloat([]byte(in))
		if gotF != wantF && !(math.IsNaN(gotF) && math.IsNaN(wantF)) || (err == nil) != (errF == nil) {
			t.Errorf("parseFloat(%q) = %v, %v; fastfloat %v, %v", in, gotF, err, wantF, errF)
		}
		wantI, errI := fastfloat.ParseInt64(in)
		gotI, err := parseInt([]byte(in))
		if gotI != wantI || (err == nil) != (errI == nil) {
			t.Errorf("parseInt(%q) = %v, %v; fastfloat %v, %v", in, gotI, err, wantI, errI)
		}
	}
}
