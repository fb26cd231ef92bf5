//go:build !race

package prefix

import (
	"testing"

	"github.com/valyala/fastjson"
)

// TestAllocs: a request's prefix work allocates nothing: its chain into a
// buffer with room, a lookup and a record in a full index, a pick among
// 100 upstreams.
func TestAllocs(t *testing.T) {
	var p fastjson.Parser
	v, err := p.Parse(benchMessages())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]uint64, 0, MaxBlocks)
	x, c := benchIndex(t)
	cands := upstreams(100, 2)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"AppendChat", func() { AppendChat(buf[:0], 1, v) }},
		{"AppendPrompt", func() { AppendPrompt(buf[:0], 1, v.GetArray()[0].Get("content")) }},
		{"Lookup", func() { x.Lookup(c) }},
		{"Record", func() { x.Record(c, 3, 0) }},
		{"PickBounded", func() { PickBounded(c[0], cands, DefaultEpsilon) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", tc.name, n)
		}
	}
}
