package prefix_test

import (
	"fmt"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// A request's way through the package: its chain built from the parsed
// body, looked up, routed by rendezvous hashing when nothing matched,
// recorded once routed. A later turn of the conversation finds its earlier
// turn and goes to the same upstream.
func Example() {
	upstreams := []prefix.Candidate{
		{ID: prefix.Hash([]byte("http://a:8000"))},
		{ID: prefix.Hash([]byte("http://b:8000"))},
		{ID: prefix.Hash([]byte("http://c:8000"))},
	}
	index := prefix.New(prefix.Options{Capacity: 1024})
	seed := prefix.Hash([]byte("my-model"))
	buf := make([]uint64, 0, prefix.MaxBlocks)
	var p fastjson.Parser

	route := func(body string) {
		v, err := p.Parse(body)
		if err != nil {
			panic(err)
		}
		chain, lead := prefix.AppendChat(buf[:0], seed, v.Get("messages"))
		m := index.Lookup(chain)
		up := int(m.Latest())
		if m.Blocks == 0 && lead > 0 { // a valid chat request has a lead
			up = prefix.PickBounded(chain[lead-1], upstreams, prefix.DefaultEpsilon)
		}
		upstreams[up].Load++ // in flight
		index.Record(chain, uint32(up), 0)
		fmt.Printf("%d of %d blocks matched; sent to upstream %d\n", m.Blocks, len(chain), up)
	}
	route(`{"messages":[{"role":"system","content":"You answer in French."},{"role":"user","content":"Hello!"}]}`)
	route(`{"messages":[{"role":"system","content":"You answer in French."},{"role":"user","content":"Hello!"},
		{"role":"assistant","content":"Bonjour !"},{"role":"user","content":"How are you?"}]}`)
	// Output:
	// 0 of 2 blocks matched; sent to upstream 2
	// 2 of 4 blocks matched; sent to upstream 2
}
