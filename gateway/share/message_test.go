package share

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/gateway/prefix"
)

func TestMessageRoundTrip(t *testing.T) {
	long := make([]uint64, prefix.MaxBlocks)
	for i := range long {
		long[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for _, c := range []Commit{
		{Upstream: "http://10.0.0.7:8000", Computed: 1536, Work: 412 * time.Millisecond, Chain: []uint64{1, 2, ^uint64(0)}, InFlight: 3},
		{Upstream: "http://a:1"},
		{Upstream: "https://engine.example", Computed: 48, Work: time.Hour, Chain: long},
	} {
		from, got, err := parseMessage(appendMessage(nil, 0xfeedface, &c))
		c.From = 0xfeedface
		if err != nil || from != 0xfeedface || !reflect.DeepEqual(got, c) {
			t.Errorf("%+v: read back from %#x %+v, %v", c, from, got, err)
		}
	}
}

func TestParseMessageRejects(t *testing.T) {
	good := appendMessage(nil, 7, &Commit{Upstream: "http://a:1", Computed: 5, Work: time.Millisecond, Chain: []uint64{9, 10}})
	tooLong := appendMessage(nil, 7, &Commit{Upstream: "http://a:1", Chain: make([]uint64, prefix.MaxBlocks+1)})
	slow := appendMessage(nil, 7, &Commit{Upstream: "http://a:1", Work: 2 * time.Hour})
	tests := []struct {
		name string
		msg  []byte
		err  string
	}{
		{"empty", nil, "cut short"},
		{"another tag", append([]byte{'x'}, good[1:]...), "not a routing message"},
		{"another version", append([]byte{tag, 2}, good[2:]...), "not a routing message of version 1"},
		{"cut in the URL", good[:13], "cut short"},
		{"cut in the chain", good[:len(good)-3], "a chain of 2 blocks in 13 bytes"},
		{"bytes left over", append(bytes.Clone(good), 0), "a chain of 2 blocks in 17 bytes"},
		{"cut before the in-flight count", good[:25], "cut short"},
		{"a chain too long", tooLong, "at most 256"},
		{"an hour of engine time and more", slow, "more than an hour"},
		{"a URL too long", appendMessage(nil, 7, &Commit{Upstream: strings.Repeat("a", maxURL+1)}), "upstream URL of 2049 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := parseMessage(tt.msg); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want one saying %q", err, tt.err)
			}
		})
	}
}

// FuzzParseMessage: any bytes are read or refused, never a panic, and what
// is read writes back as the same bytes.
func FuzzParseMessage(f *testing.F) {
	f.Add(appendMessage(nil, 7, &Commit{Upstream: "http://a:1", Computed: 5, Work: time.Millisecond, Chain: []uint64{9, 10}}))
	f.Add(appendMessage(nil, 0, &Commit{}))
	f.Add([]byte{tag, version})
	f.Fuzz(func(t *testing.T, b []byte) {
		from, c, err := parseMessage(b)
		if err != nil {
			return
		}
		if again := appendMessage(nil, from, &c); !bytes.Equal(again, b) {
			// Uvarints have one shortest form; a longer one reads the same.
			if _, c2, err := parseMessage(again); err != nil || !reflect.DeepEqual(c2, c) {
				t.Fatalf("%x read as %+v, written back as %x", b, c, again)
			}
		}
	})
}
