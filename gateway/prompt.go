package gateway

import (
	"sync"

	"github.com/valyala/fastjson"

	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// prompt is a request's prompt as prefix affinity names it (gateway/prefix):
// its chain, and how many of its hashes the first message took (lead). It
// is pooled, so that a least_ttft request's chain costs no allocation and
// a request of another pool carries nothing but a nil pointer.
type prompt struct {
	chain []uint64 // in buf
	lead  int
	buf   [prefix.MaxBlocks]uint64
}

var prompts = sync.Pool{New: func() any { return new(prompt) }}

// newPrompt hashes the prompt of a valid request for model on ep (input:
// its messages or prompt) into a pooled prompt, the chain seeded with the
// model's name so that models never share one.
func newPrompt(ep Endpoint, model []byte, input *fastjson.Value) *prompt {
	pr := prompts.Get().(*prompt)
	seed := prefix.Hash(model)
	if ep == Completions {
		pr.chain, pr.lead = prefix.AppendPrompt(pr.buf[:0], seed, input)
	} else {
		pr.chain, pr.lead = prefix.AppendChat(pr.buf[:0], seed, input)
	}
	return pr
}

// Release gives back what r holds for routing: its prompt's chain, in a
// least_ttft pool. Call it once, after the request's last Choose (a retry
// on another upstream chooses again); a Request of another pool holds
// nothing, and Release does nothing.
func (r *Request) Release() {
	if r.prompt != nil {
		prompts.Put(r.prompt)
		r.prompt = nil
	}
}
