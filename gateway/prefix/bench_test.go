package prefix

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fastjson"
)

// benchMessages is a chat of 8 messages: a system prompt of 1,500 tokens
// (6,000 bytes), then three rounds of question and answer, then a
// question.
func benchMessages() string {
	words := strings.Fields("the engine keeps a prefix cache of every prompt it prefilled and serves a later prompt that begins the same way from it")
	var sys strings.Builder
	for i := 0; sys.Len() < 6000; i++ {
		sys.WriteString(words[i%len(words)])
		sys.WriteByte(' ')
	}
	msgs := []string{msg("system", sys.String()[:6000])}
	for i := range 3 {
		msgs = append(msgs,
			msg("user", strings.Repeat("Question "+strconv.Itoa(i)+": why? ", 12)),
			msg("assistant", strings.Repeat("Because the cache was warm. ", 14)))
	}
	return list(append(msgs, msg("user", "And the last question?"))...)
}

// BenchmarkChain: the chain of benchMessages from its parsed value, as the
// gateway would build it beside CheckRequest; parse is fastjson's parse of
// the same body alone, which the gateway already pays, for scale.
func BenchmarkChain(b *testing.B) {
	body := []byte(`{"model":"m","messages":` + benchMessages() + `}`)
	b.Run("chain", func(b *testing.B) {
		var p fastjson.Parser
		v, err := p.ParseBytes(body)
		if err != nil {
			b.Fatal(err)
		}
		msgs := v.Get("messages")
		buf := make([]uint64, 0, MaxBlocks)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			c, _ := AppendChat(buf[:0], 1, msgs)
			n = len(c)
		}
		b.ReportMetric(float64(n), "blocks")
	})
	b.Run("parse", func(b *testing.B) {
		var p fastjson.Parser
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.ParseBytes(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchIndex is an Index of DefaultCapacity filled past it by requests of
// the usual shape: one of 8 system prompts of 94 blocks, and a question of
// 2 blocks of their own. It returns the index and a chain of system prompt
// 0 whose question is new.
func benchIndex(tb testing.TB) (*Index, []uint64) {
	tb.Helper()
	x := New(Options{})
	for i := range 2 * DefaultCapacity {
		if i%100 == 0 {
			for s := range systems {
				x.Record(systems[s], uint32(s), 0)
			}
		}
		c := request(i%8, uint64(i))
		x.Record(c[len(c)-2:], uint32(i%100), 0)
	}
	if x.Len() != x.Capacity() {
		tb.Fatalf("benchIndex: %d entries of %d", x.Len(), x.Capacity())
	}
	return x, request(0, 1<<40)
}

// systems are the chains of 8 system prompts of 94 blocks (6,000 bytes).
var systems = func() (s [8][]uint64) {
	for i := range s {
		s[i] = chainOf(uint64(1000+i), 94)
	}
	return s
}()

// request is the chain of a request on system prompt sys with question q
// (2 blocks).
func request(sys int, q uint64) []uint64 {
	c := append(make([]uint64, 0, 96), systems[sys]...)
	prev := c[len(c)-1]
	for i := range uint64(2) {
		prev = avalanche(prev ^ q<<1 ^ i)
		c = append(c, prev)
	}
	return c
}

// BenchmarkLookup: at 100,000 indexed chain entries, a request whose
// system prompt is indexed (94 of its 96 blocks match), one wholly
// indexed, and a new prompt at the bound (256 blocks, none match).
func BenchmarkLookup(b *testing.B) {
	x, hit := benchIndex(b)
	whole := request(7, 2*DefaultCapacity-1)
	miss := chainOf(1<<30, MaxBlocks)
	for _, bc := range []struct {
		name   string
		chain  []uint64
		blocks int
	}{{"system-prompt", hit, 94}, {"whole", whole, 96}, {"miss-256", miss, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			if m := x.Lookup(bc.chain); m.Blocks != bc.blocks {
				b.Fatalf("Lookup matched %d blocks, want %d", m.Blocks, bc.blocks)
			}
			b.ReportAllocs()
			for b.Loop() {
				x.Lookup(bc.chain)
			}
		})
	}
}

// BenchmarkRecord: at 100,000 indexed chain entries (full), a request of
// the usual shape (94 blocks refreshed, 2 new, each evicting), and a new
// prompt at the bound (256 new blocks).
func BenchmarkRecord(b *testing.B) {
	x, _ := benchIndex(b)
	b.Run("system-prompt", func(b *testing.B) {
		chains := make([][]uint64, 1024)
		for i := range chains {
			chains[i] = request(i%8, uint64(1<<40+i))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			x.Record(chains[i%len(chains)], uint32(i%100), uint64(i))
			i++
		}
	})
	b.Run("new-256", func(b *testing.B) {
		chains := make([][]uint64, 256)
		for i := range chains {
			chains[i] = chainOf(uint64(1<<32+i), MaxBlocks)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			x.Record(chains[i%len(chains)], uint32(i%100), uint64(i))
			i++
		}
	})
}

// BenchmarkIndexParallel: Lookup then Record of requests of the usual
// shape from every P: all on the 8 system prompts (shared: the sets of
// their blocks are contended), or each P on prompts of its own (apart).
func BenchmarkIndexParallel(b *testing.B) {
	x, _ := benchIndex(b)
	for _, bc := range []struct {
		name   string
		shared bool
	}{{"shared", true}, {"apart", false}} {
		b.Run(bc.name, func(b *testing.B) {
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1)
				chains := make([][]uint64, 256)
				for i := range chains {
					if bc.shared {
						chains[i] = request(i%8, g<<32|uint64(i))
					} else {
						chains[i] = append(chainOf(g<<20|uint64(i%8), 94), chainOf(g<<32|uint64(i), 2)...)
					}
				}
				i := 0
				for pb.Next() {
					c := chains[i%len(chains)]
					m := x.Lookup(c)
					x.Record(c, m.Latest(), uint64(i))
					i++
				}
			})
		})
	}
}

// BenchmarkPickBounded: one pick among 100 upstreams of unequal loads.
func BenchmarkPickBounded(b *testing.B) {
	cands := upstreams(100, 0)
	for i := range cands {
		cands[i].Load = int64(i % 17)
	}
	ks := keys(1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		PickBounded(ks[i%len(ks)], cands, DefaultEpsilon)
		i++
	}
}
