package prefix

import (
	"encoding/binary"

	"github.com/valyala/fastjson"
)

// BlockBytes is a block's size: 16 tokens at the ~4 bytes of text a token
// the gateway estimates with, the granularity of vLLM's prefix cache
// (block_size 16). A finer block would tell apart prefixes that vLLM does
// not, and take more hashes and entries for each prompt; a coarser one
// would miss up to a block of every shared prefix. A completions prompt of
// token ids is cut at exactly 16 tokens a block.
const BlockBytes = 64

// MaxBlocks bounds a chain: 16 KiB of prompt text, ~4,000 tokens, covers
// the system prompts and shared documents prefix routing is for (often
// 1,000 to 2,000 tokens), and past it two prompts that agree so far are all
// but certain to agree further. It bounds the work per request (hashing, a
// Lookup's ≤ 9 probes, a Record's ≤ 256 entries) and how much of the Index
// one request can take.
const MaxBlocks = 256

// The tags that start each field of a message in the byte stream a chain
// hashes, so that moving bytes from one field to the next changes it.
const (
	tagRole byte = 1 + iota
	tagContent
	tagToolCall
	tagArguments
)

// AppendChat appends to dst the chain of a chat request's messages (the
// parsed value of its "messages"): at most MaxBlocks hashes, the i-th
// naming the prompt up to the end of its i-th block, each the XXH64 of
// its block seeded with the one before (the first with seed, which names
// what the chain is for: 0, or Hash of the model's name, so that models
// never share a chain). It allocates nothing when dst has room for
// MaxBlocks more.
//
// Each message is its role, its content (a string, or the text of its
// content parts back to back, so that a string and the same text as one
// part agree) and its tool calls' names and arguments, in that order
// whatever the order of its keys, cut into blocks of BlockBytes; a message
// ends its last block, so a conversation's later turn extends its earlier
// turn's chain. Text is hashed unescaped, as the engine reads it. What the
// chain cannot name ends it: a message that is not an object, a content
// part that is not text (an image: naming it would mean hashing all of
// it), content or tool calls of another shape; the chain then names the
// prompt up to there, which is still a prefix any request beginning the
// same way shares.
//
// lead is how many of the appended hashes the first message took (the
// system prompt, when there is one): chain[len(dst)+lead-1] names it (its
// first 16 KiB), the key to PickBounded for a request with no history,
// which then goes where others with the same system prompt or the same
// first message (a conversation's earlier turns) go. lead is 0 when the
// chain is empty or its first message could not be read.
func AppendChat(dst []uint64, seed uint64, messages *fastjson.Value) (chain []uint64, lead int) {
	c := chainer{out: dst, prev: seed, room: MaxBlocks}
	if messages == nil || messages.Type() != fastjson.TypeArray {
		return dst, 0
	}
	msgs, _ := messages.Array()
	for i, m := range msgs {
		ok := c.message(m)
		if i == 0 {
			lead = len(c.out) - len(dst)
		}
		if !ok || c.room == 0 {
			break
		}
	}
	return c.out, lead
}

// AppendPrompt appends to dst the chain of a completions request's prompt
// (the parsed value of its "prompt"), as AppendChat does for messages: a
// string's bytes, or token ids (4 bytes each, little-endian: 16 to a
// block); of a batch (an array of strings or of token arrays), its first
// prompt. lead is the whole chain: a prompt is one message.
func AppendPrompt(dst []uint64, seed uint64, prompt *fastjson.Value) (chain []uint64, lead int) {
	c := chainer{out: dst, prev: seed, room: MaxBlocks}
	if prompt == nil {
		return dst, 0
	}
	switch prompt.Type() {
	case fastjson.TypeString:
		c.writeString(prompt)
	case fastjson.TypeArray:
		a, _ := prompt.Array()
		if len(a) == 0 {
			break
		}
		switch first := a[0]; first.Type() {
		case fastjson.TypeNumber:
			c.tokens(a)
		case fastjson.TypeString:
			c.writeString(first)
		case fastjson.TypeArray:
			ids, _ := first.Array()
			c.tokens(ids)
		}
	}
	c.end()
	return c.out, len(c.out) - len(dst)
}

// chainer cuts a byte stream into blocks and appends their chained hashes.
type chainer struct {
	out  []uint64
	prev uint64 // the last hash appended, or the seed
	room int    // hashes still allowed
	n    int    // bytes in buf
	buf  [BlockBytes]byte
}

// message writes one chat message and ends its block; false: the chain
// ends here.
func (c *chainer) message(m *fastjson.Value) bool {
	o, err := m.Object()
	if err != nil {
		return false
	}
	c.writeByte(tagRole)
	c.writeString(o.Get("role"))
	c.writeByte(tagContent)
	ok := c.content(o.Get("content")) && c.toolCalls(o.Get("tool_calls"))
	c.end()
	return ok
}

// content writes a message's content: a string, or its text parts.
func (c *chainer) content(v *fastjson.Value) bool {
	if v == nil {
		return true
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeString:
		c.writeString(v)
		return true
	case fastjson.TypeArray:
		parts, _ := v.Array()
		for _, p := range parts {
			o, err := p.Object()
			if err != nil {
				return false
			}
			text := o.Get("text")
			if typ := o.Get("type"); typ != nil && string(typ.GetStringBytes()) != "text" ||
				text == nil || text.Type() != fastjson.TypeString {
				return false
			}
			c.writeString(text)
		}
		return true
	}
	return false
}

// toolCalls writes an assistant message's tool calls: each function's name
// and arguments.
func (c *chainer) toolCalls(v *fastjson.Value) bool {
	if v == nil || v.Type() == fastjson.TypeNull {
		return true
	}
	calls, err := v.Array()
	if err != nil {
		return false
	}
	for _, call := range calls {
		fn := call.Get("function")
		if fn == nil || fn.Type() != fastjson.TypeObject {
			return false
		}
		c.writeByte(tagToolCall)
		c.writeString(fn.Get("name"))
		c.writeByte(tagArguments)
		c.writeString(fn.Get("arguments"))
	}
	return true
}

// tokens writes token ids; a value that is not one ends the chain.
func (c *chainer) tokens(ids []*fastjson.Value) {
	var b [4]byte
	for _, id := range ids {
		n, err := id.Uint()
		if id.Type() != fastjson.TypeNumber || err != nil || uint(uint32(n)) != n {
			return
		}
		binary.LittleEndian.PutUint32(b[:], uint32(n))
		c.write(b[:])
	}
}

// writeString writes v's unescaped bytes when v is a string.
func (c *chainer) writeString(v *fastjson.Value) {
	if v != nil && v.Type() == fastjson.TypeString {
		b, _ := v.StringBytes()
		c.write(b)
	}
}

func (c *chainer) write(p []byte) {
	for len(p) > 0 && c.room > 0 {
		if c.n == 0 && len(p) >= BlockBytes {
			c.emit(p[:BlockBytes])
			p = p[BlockBytes:]
			continue
		}
		k := copy(c.buf[c.n:], p)
		c.n += k
		p = p[k:]
		if c.n == BlockBytes {
			c.emit(c.buf[:])
		}
	}
}

func (c *chainer) writeByte(b byte) {
	c.buf[c.n] = b
	c.n++
	if c.n == BlockBytes {
		c.emit(c.buf[:])
	}
}

// end ends the block being filled, if any: a message's last block.
func (c *chainer) end() {
	if c.n > 0 {
		c.emit(c.buf[:c.n])
	}
}

// emit appends the hash of the next block, or drops it when the chain is
// full.
func (c *chainer) emit(block []byte) {
	c.n = 0
	if c.room == 0 {
		return
	}
	c.prev = xxh64(block, c.prev)
	c.out = append(c.out, c.prev)
	c.room--
}
