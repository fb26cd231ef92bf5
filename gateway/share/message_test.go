package share

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// TestAppendClamps: what a message's reader would refuse, its writer
// clamps to the bound: an overloaded engine's backlog of hours still
// shares the rest of its observation.
func TestAppendClamps(t *testing.T) {
	m, err := parseMessage(appendCommit(nil, 7, &Commit{Upstream: "http://a:1", Work: 3 * time.Hour, InFlight: 1 << 40}))
	if err != nil || m.commit.Work != time.Hour || m.commit.InFlight != maxCount {
		t.Fatalf("a commit past the bounds: %+v, %v", m.commit, err)
	}
	o := Observed{Upstream: "http://a:1", Observation: predict.Observation{Load: predict.Load{Backlog: 5 * time.Hour, InFlight: -3}, PromptTokens: 1700}}
	m, err = parseMessage(appendObserved(nil, 7, &o))
	if l := m.obs.Observation.Load; err != nil || l.Backlog != time.Hour || l.InFlight != 0 || m.obs.Observation.PromptTokens != 1700 {
		t.Fatalf("an observation past the bounds: %+v, %v", m.obs, err)
	}
}

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
		m, err := parseMessage(appendCommit(nil, 0xfeedface, &c))
		c.From = 0xfeedface
		if err != nil || m.from != 0xfeedface || m.observed || !reflect.DeepEqual(m.commit, c) {
			t.Errorf("%+v: read back %+v, %v", c, m, err)
		}
	}
	obs := Observed{Upstream: "http://10.0.0.7:8000", Observation: predict.Observation{
		FirstToken: true, Unsplit: true, CachedReported: true,
		Parts:        predict.Parts{time.Millisecond, 2 * time.Millisecond, 300 * time.Millisecond, 9 * time.Millisecond, 0, 100 * time.Microsecond},
		PromptTokens: 1700, EstimatedTokens: 1400, CachedTokens: 1648,
		Expected: predict.Expected{Cached: 1344, Distance: 9000},
		Load:     predict.Load{Waiting: 2, EngineKnown: true, InFlight: 5, Backlog: 800 * time.Millisecond},
	}}
	m, err := parseMessage(appendObserved(nil, 7, &obs))
	obs.From = 7
	if err != nil || !m.observed || !reflect.DeepEqual(m.obs, obs) {
		t.Errorf("%+v: read back %+v, %v", obs, m.obs, err)
	}
}

func TestParseMessageRejects(t *testing.T) {
	good := appendCommit(nil, 7, &Commit{Upstream: "http://a:1", Computed: 5, Work: time.Millisecond, Chain: []uint64{9, 10}})
	tooLong := appendCommit(nil, 7, &Commit{Upstream: "http://a:1", Chain: make([]uint64, prefix.MaxBlocks+1)})
	// What appendCommit would clamp: two hours of engine time.
	slow := binary.AppendUvarint(appendHeader(nil, tagCommit, 7, "http://a:1"), 0)
	slow = binary.AppendUvarint(slow, uint64(2*time.Hour))
	slow = append(slow, 0, 0)
	tests := []struct {
		name string
		msg  []byte
		err  string
	}{
		{"empty", nil, "cut short"},
		{"another tag", append([]byte{'x'}, good[1:]...), "not a routing message"},
		{"an observation's flags unknown", append(appendHeader(nil, tagObserved, 7, "http://a:1"), 0x80), "unknown observation flags"},
		{"an observation cut short", append(appendHeader(nil, tagObserved, 7, "http://a:1"), 0, 1, 2), "cut short"},
		{"bytes past an observation", append(appendObserved(nil, 7, &Observed{Upstream: "http://a:1"}), 0), "1 bytes past an observation"},
		{"another version", append([]byte{tagCommit, 2}, good[2:]...), "not a routing message of version 1"},
		{"cut in the URL", good[:13], "cut short"},
		{"cut in the chain", good[:len(good)-3], "a chain of 2 blocks in 13 bytes"},
		{"bytes left over", append(bytes.Clone(good), 0), "a chain of 2 blocks in 17 bytes"},
		{"cut before the in-flight count", good[:25], "cut short"},
		{"a chain too long", tooLong, "a chain's blocks of 257: at most 256"},
		{"an hour of engine time and more", slow, "an engine time in ns of 7200000000000"},
		{"a URL too long", appendCommit(nil, 7, &Commit{Upstream: strings.Repeat("a", maxURL+1)}), "an upstream URL of 2049"},
		{"tokens computed past the bound", append(binary.AppendUvarint(appendHeader(nil, tagCommit, 7, "http://a:1"), maxTokens+1), 0, 0, 0), "tokens computed of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseMessage(tt.msg); err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want one saying %q", err, tt.err)
			}
		})
	}
}

// FuzzParseMessage: any bytes are read or refused, never a panic, and what
// is read writes back as bytes that read the same.
func FuzzParseMessage(f *testing.F) {
	f.Add(appendCommit(nil, 7, &Commit{Upstream: "http://a:1", Computed: 5, Work: time.Millisecond, Chain: []uint64{9, 10}, InFlight: 2}))
	f.Add(appendCommit(nil, 0, &Commit{}))
	f.Add(appendObserved(nil, 7, &Observed{Upstream: "http://a:1", Observation: predict.Observation{PromptTokens: 9, Parts: predict.Parts{1, 2, 3}}}))
	f.Add([]byte{tagCommit, version})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMessage(b)
		if err != nil {
			return
		}
		var again []byte
		if m.observed {
			again = appendObserved(nil, m.from, &m.obs)
		} else {
			again = appendCommit(nil, m.from, &m.commit)
		}
		if m2, err := parseMessage(again); err != nil || !reflect.DeepEqual(m2, m) {
			t.Fatalf("%x read as %+v, written back as %x, read as %+v (%v)", b, m, again, m2, err)
		}
	})
}
