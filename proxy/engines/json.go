package engines

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson/fastfloat"
)

// The readers parse every event's data with jsonParser: fastjson's values
// and rules (what it accepts, how it unescapes, how it reads numbers), parsed
// by a loop with a stack of open containers instead of fastjson's recursion.
// An event is parsed on the goroutine of its stream, whose stack is what an
// open stream costs: fastjson takes about 530 bytes of stack per level of
// nesting (an OpenAI chunk has four, usage details five), which alone did
// not fit the 4 KiB a stream's goroutine can otherwise live in.

// jsonType is a JSON value's type.
type jsonType uint8

const (
	jsonNull jsonType = iota
	jsonObject
	jsonArray
	jsonString
	jsonNumber
	jsonTrue
	jsonFalse
	jsonRawString // a string not unescaped yet: Type unescapes it
)

// jsonMaxDepth bounds nesting, as fastjson's MaxDepth: the top value is at
// depth 1, a value inside k containers at depth k+1.
const jsonMaxDepth = 300

// jsonValue is a parsed JSON value. It is valid until its parser parses
// again or goes back to its pool.
type jsonValue struct {
	t             jsonType
	keysUnescaped bool   // an object's keys were unescaped
	s             []byte // a string's or a number's text (the parser's document)
	o             []jsonMember
	a             []*jsonValue
}

type jsonMember struct {
	k []byte
	v *jsonValue
}

var (
	jsonValueTrue  = &jsonValue{t: jsonTrue}
	jsonValueFalse = &jsonValue{t: jsonFalse}
	jsonValueNull  = &jsonValue{t: jsonNull}
)

var errJSON = errors.New("engines: not JSON")

// jsonParser parses JSON documents, reusing its memory. Not safe for
// concurrent use.
type jsonParser struct {
	b     []byte      // the document: strings point into it (unescaped in place)
	vs    []jsonValue // the values, reused
	stack []*jsonValue
}

// jsonParsers parse events' data. They are shared, not one per reader: a
// parser keeps the memory of the largest document it parsed, which an open
// stream would otherwise hold between its events.
var jsonParsers = sync.Pool{New: func() any { return new(jsonParser) }}

// parse parses data, which must hold exactly one JSON value (whitespace
// around it aside).
func (p *jsonParser) parse(data []byte) (*jsonValue, error) {
	p.b = append(p.b[:0], data...)
	s := p.b
	p.vs, p.stack = p.vs[:0], p.stack[:0]
	i := skipJSONSpace(s, 0)
	var root *jsonValue
	var key []byte // the key of the object member whose value comes next
	for {
		if i >= len(s) || len(p.stack)+1 > jsonMaxDepth {
			return nil, errJSON
		}
		v, next, ok := p.value(s, i)
		if !ok {
			return nil, errJSON
		}
		i = next
		if n := len(p.stack); n == 0 {
			root = v
		} else if parent := p.stack[n-1]; parent.t == jsonObject {
			parent.o = append(parent.o, jsonMember{k: key, v: v})
		} else {
			parent.a = append(parent.a, v)
		}
		if v.t == jsonObject || v.t == jsonArray {
			i = skipJSONSpace(s, i)
			if i >= len(s) {
				return nil, errJSON
			}
			if s[i] != closer(v.t) {
				p.stack = append(p.stack, v)
				if i, ok = p.memberStart(s, i, &key); !ok {
					return nil, errJSON
				}
				continue
			}
			i++ // empty
		}
		// After a value: close containers, or go on to the next member.
		for {
			i = skipJSONSpace(s, i)
			n := len(p.stack)
			if n == 0 {
				if i != len(s) {
					return nil, errJSON // a tail after the value
				}
				return root, nil
			}
			if i >= len(s) {
				return nil, errJSON
			}
			top := p.stack[n-1]
			if s[i] == closer(top.t) {
				p.stack = p.stack[:n-1]
				i++
				continue
			}
			if s[i] != ',' {
				return nil, errJSON
			}
			if i, ok = p.memberStart(s, i+1, &key); !ok {
				return nil, errJSON
			}
			break
		}
	}
}

// memberStart reads what comes before the next value in the innermost open
// container: nothing for an array, the key and ':' for an object. It
// returns where the value starts.
func (p *jsonParser) memberStart(s []byte, i int, key *[]byte) (int, bool) {
	i = skipJSONSpace(s, i)
	if p.stack[len(p.stack)-1].t == jsonArray {
		return i, true
	}
	if i >= len(s) || s[i] != '"' {
		return 0, false
	}
	k, end, ok := rawKey(s, i+1)
	if !ok {
		return 0, false
	}
	i = skipJSONSpace(s, end)
	if i >= len(s) || s[i] != ':' {
		return 0, false
	}
	*key = k
	return skipJSONSpace(s, i+1), true
}

// value reads the value starting at s[i] (a container only opened) and
// returns where it ends.
func (p *jsonParser) value(s []byte, i int) (*jsonValue, int, bool) {
	switch rest := s[i:]; rest[0] {
	case '{':
		return p.alloc(jsonObject, nil), i + 1, true
	case '[':
		return p.alloc(jsonArray, nil), i + 1, true
	case '"':
		str, end, ok := rawString(s, i+1)
		if !ok {
			return nil, 0, false
		}
		return p.alloc(jsonRawString, str), end, true
	case 't':
		return literal(rest, "true", jsonValueTrue, i)
	case 'f':
		return literal(rest, "false", jsonValueFalse, i)
	case 'n':
		if !hasWord(rest, "null") && len(rest) >= 3 && bytes.EqualFold(rest[:3], []byte("nan")) {
			return p.alloc(jsonNumber, rest[:3]), i + 3, true
		}
		return literal(rest, "null", jsonValueNull, i)
	}
	n, ok := rawNumber(s[i:])
	if !ok {
		return nil, 0, false
	}
	return p.alloc(jsonNumber, s[i:i+n]), i + n, true
}

func literal(rest []byte, word string, v *jsonValue, i int) (*jsonValue, int, bool) {
	if !hasWord(rest, word) {
		return nil, 0, false
	}
	return v, i + len(word), true
}

// hasWord reports that b starts with word (a comparison: no copy).
func hasWord(b []byte, word string) bool {
	return len(b) >= len(word) && string(b[:len(word)]) == word
}

func closer(t jsonType) byte {
	if t == jsonObject {
		return '}'
	}
	return ']'
}

// alloc returns a value from the parser's reused ones. A value handed out
// before the slice grew stays where it was, which its parent points to.
func (p *jsonParser) alloc(t jsonType, s []byte) *jsonValue {
	if len(p.vs) < cap(p.vs) {
		p.vs = p.vs[:len(p.vs)+1]
	} else {
		p.vs = append(p.vs, jsonValue{})
	}
	v := &p.vs[len(p.vs)-1]
	v.t, v.keysUnescaped, v.s, v.o, v.a = t, false, s, v.o[:0], v.a[:0]
	return v
}

func skipJSONSpace(s []byte, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
		i++
	}
	return i
}

// rawKey reads a key whose text starts at s[i]; it returns the text and the
// index past the closing quote.
func rawKey(s []byte, i int) ([]byte, int, bool) {
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"':
			return s[i:j], j + 1, true
		case '\\':
			return rawString(s, i)
		}
	}
	return nil, 0, false
}

// rawString reads a string whose text starts at s[i]: up to the first quote
// not escaped by an odd run of backslashes before it. Its escapes are not
// checked (fastjson's rule; unescaping keeps what it cannot read).
func rawString(s []byte, i int) ([]byte, int, bool) {
	from := i
	for {
		n := bytes.IndexByte(s[from:], '"')
		if n < 0 {
			return nil, 0, false
		}
		q := from + n
		k := q
		for k > i && s[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return s[i:q], q + 1, true
		}
		from = q + 1
	}
}

// rawNumber returns the length of the number at the start of s, by
// fastjson's loose rule: a run of digits, '.', '-', '+', 'e' and 'E' (its
// text is checked when it is read), or inf or nan, with a sign or not.
func rawNumber(s []byte) (int, bool) {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= '0' && ch <= '9' || ch == '.' || ch == '-' || ch == 'e' || ch == 'E' || ch == '+' {
			continue
		}
		if i == 0 || i == 1 && (s[0] == '-' || s[0] == '+') {
			if len(s)-i >= 3 && (bytes.EqualFold(s[i:i+3], []byte("inf")) || bytes.EqualFold(s[i:i+3], []byte("nan"))) {
				return i + 3, true
			}
			return 0, false
		}
		return i, true
	}
	return len(s), true
}

// Type returns v's type, unescaping a string the first time.
func (v *jsonValue) Type() jsonType {
	if v.t == jsonRawString {
		v.s = unescapeJSON(v.s)
		v.t = jsonString
	}
	return v.t
}

// Get returns the value at the path of keys (an array index in decimal
// for an array), nil when there is none.
func (v *jsonValue) Get(keys ...string) *jsonValue {
	for _, key := range keys {
		if v == nil {
			return nil
		}
		switch v.t {
		case jsonObject:
			v = v.member(key)
		case jsonArray:
			n, err := strconv.Atoi(key)
			if err != nil || n < 0 || n >= len(v.a) {
				return nil
			}
			v = v.a[n]
		default:
			return nil
		}
	}
	return v
}

// member returns the value of an object's first member named key. Keys
// are unescaped only when the key cannot be found as written.
func (v *jsonValue) member(key string) *jsonValue {
	if !v.keysUnescaped && strings.IndexByte(key, '\\') < 0 {
		for i := range v.o {
			if string(v.o[i].k) == key {
				return v.o[i].v
			}
		}
	}
	if !v.keysUnescaped {
		for i := range v.o {
			v.o[i].k = unescapeJSON(v.o[i].k)
		}
		v.keysUnescaped = true
	}
	for i := range v.o {
		if string(v.o[i].k) == key {
			return v.o[i].v
		}
	}
	return nil
}

// GetArray returns the array at the path, nil when it is not one.
func (v *jsonValue) GetArray(keys ...string) []*jsonValue {
	v = v.Get(keys...)
	if v == nil || v.t != jsonArray {
		return nil
	}
	return v.a
}

// GetStringBytes returns the string at the path, nil when it is not one.
// The bytes are the parser's.
func (v *jsonValue) GetStringBytes(keys ...string) []byte {
	v = v.Get(keys...)
	if v == nil || v.Type() != jsonString {
		return nil
	}
	return v.s
}

// GetInt returns the integer at the path, 0 when it is not one.
func (v *jsonValue) GetInt(keys ...string) int {
	v = v.Get(keys...)
	if v == nil || v.t != jsonNumber {
		return 0
	}
	n := fastfloat.ParseInt64BestEffort(string(v.s))
	if int64(int(n)) != n {
		return 0
	}
	return int(n)
}

// GetBool reports whether the value at the path is true.
func (v *jsonValue) GetBool(keys ...string) bool {
	v = v.Get(keys...)
	return v != nil && v.t == jsonTrue
}

// Int returns a number as an int; an error when it is not an integer.
func (v *jsonValue) Int() (int, error) {
	if v.t != jsonNumber {
		return 0, errJSON
	}
	n, err := parseInt(v.s)
	if err != nil || int64(int(n)) != n {
		return 0, errJSON
	}
	return int(n), nil
}

// Float64 returns a number as a float64.
func (v *jsonValue) Float64() (float64, error) {
	if v.t != jsonNumber {
		return 0, errJSON
	}
	return parseFloat(v.s)
}

// parseFloat is fastfloat.Parse of b, without copying b: fastfloat's
// error quotes its text, so a string made of b for it is copied to the
// heap. The text is handed over only when the copy-free reading says 0,
// which is also what it says for text that is not a number.
func parseFloat(b []byte) (float64, error) {
	if f := fastfloat.ParseBestEffort(string(b)); f != 0 || isZero(b) {
		return f, nil
	}
	return fastfloat.Parse(string(b))
}

// parseInt is fastfloat.ParseInt64 of b, without copying b (parseFloat).
func parseInt(b []byte) (int64, error) {
	if n := fastfloat.ParseInt64BestEffort(string(b)); n != 0 || string(b) == "0" || string(b) == "-0" {
		return n, nil
	}
	return fastfloat.ParseInt64(string(b))
}

// isZero reports a plain zero, "0" or "-0" with zeros after a point
// ("0.00"): a number that both readings take for 0.
func isZero(b []byte) bool {
	b = bytes.TrimPrefix(b, []byte("-"))
	if len(b) == 0 || b[0] != '0' {
		return false
	}
	b = b[1:]
	if len(b) == 0 {
		return true
	}
	if b[0] != '.' || len(b) == 1 {
		return false
	}
	return len(bytes.Trim(b[1:], "0")) == 0
}

// unescapeJSON unescapes s in place (s is the parser's), keeping an escape
// it cannot read as it is.
func unescapeJSON(s []byte) []byte {
	n := bytes.IndexByte(s, '\\')
	if n < 0 {
		return s
	}
	b := s[:n] // written behind what is read: never past it
	s = s[n+1:]
	for len(s) > 0 {
		ch := s[0]
		s = s[1:]
		switch ch {
		case '"', '\\', '/':
			b = append(b, ch)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			b, s = unescapeU(b, s)
		default:
			b = append(b, '\\', ch)
		}
		n = bytes.IndexByte(s, '\\')
		if n < 0 {
			b = append(b, s...)
			break
		}
		b = append(b, s[:n]...)
		s = s[n+1:]
	}
	return b
}

// unescapeU appends the character of the \u escape whose hex digits start
// s (a surrogate pair takes the next escape too) and returns the rest.
func unescapeU(b, s []byte) ([]byte, []byte) {
	if len(s) < 4 {
		return append(b, `\u`...), s
	}
	xs := s[:4]
	x, err := strconv.ParseUint(string(xs), 16, 16)
	if err != nil {
		return append(b, `\u`...), s
	}
	s = s[4:]
	if !utf16.IsSurrogate(rune(x)) {
		return utf8.AppendRune(b, rune(x)), s
	}
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return append(append(b, `\u`...), xs...), s
	}
	x1, err := strconv.ParseUint(string(s[2:6]), 16, 16)
	if err != nil {
		return append(append(b, `\u`...), xs...), s
	}
	return utf8.AppendRune(b, utf16.DecodeRune(rune(x), rune(x1))), s[6:]
}
