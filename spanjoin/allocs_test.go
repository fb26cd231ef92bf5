//go:build !race

package spanjoin

import (
	"testing"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/proxy/engines"
)

// TestPassThroughAllocs: a record that does not wait costs the joiner no
// allocation, whether it could never be split by a span (a cancel) or its
// upstream sends none (it is only remembered, for a late span).
func TestPassThroughAllocs(t *testing.T) {
	j := New(discard{}, Options{})
	cancelled := newRecord(1, engines.KindVLLM)
	cancelled.Reason = endreason.ClientCancel
	generic := newRecord(2, engines.KindGeneric)
	if n := testing.AllocsPerRun(1000, func() { j.Emit(cancelled) }); n != 0 {
		t.Errorf("a record that cannot be split: %v allocations", n)
	}
	i := 0
	if n := testing.AllocsPerRun(100_000, func() { // more traces than the set remembers
		i++
		generic.TraceID[0], generic.TraceID[1], generic.TraceID[2] = byte(i), byte(i>>8), byte(i>>16)
		j.Emit(generic)
	}); n != 0 {
		t.Errorf("a record of an upstream without spans: %v allocations", n)
	}
}
