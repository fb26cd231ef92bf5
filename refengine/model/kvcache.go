package model

import (
	"fmt"
	"sync"
)

// BlockSize is the number of token positions per KV cache block.
const BlockSize = 16

// BlockPool is the paged KV cache: a fixed number of blocks, each holding
// the keys and values of BlockSize token positions for every layer. Blocks
// are owned by sequences (Seq) through reference counts. Full blocks can be
// published to a prefix cache keyed by a hash chain of their tokens, so a
// later prompt with the same prefix shares them instead of recomputing it;
// published blocks nobody references stay cached and are evicted, least
// recently released first (of one chain, the tail before the head: Release),
// only when Reserve needs room.
//
// The bookkeeping methods are safe for concurrent use. The block contents are
// written and read only by Model.Step, which must not run concurrently with
// Reserve or Release on the sequences it steps.
type BlockPool struct {
	cfg         Config
	hs          int // head size
	kSize       int // floats of one kv head's keys in a block: hs×BlockSize
	vSize       int // floats of one kv head's values in a block: ceil(hs/16) panels of 16×16
	layerStride int // floats per layer in one block: K and V of all kv heads
	blockStride int // floats per block
	data        []float32

	mu         sync.Mutex
	free       []int32 // unreferenced, uncached blocks (a stack)
	meta       []blockMeta
	cache      map[uint64]int32 // chain hash -> block
	lruHead    int32            // oldest evictable cached block, or -1
	lruTail    int32            // newest evictable cached block, or -1
	nEvictable int
}

type blockMeta struct {
	ref        int32
	cached     bool
	hash       uint64 // chain hash of this block (valid when cached)
	parent     uint64 // chain hash of the previous block (0 for the first)
	tokens     [BlockSize]int32
	prev, next int32 // LRU links while evictable
}

// Seq is one sequence's KV state: the blocks holding its first Len() token
// positions plus any reserved room. A Seq belongs to the BlockPool that made
// it and must be used by one goroutine at a time.
type Seq struct {
	pool   *BlockPool
	blocks []int32
	n      int
}

// Len returns the number of tokens whose keys and values are in the cache.
func (s *Seq) Len() int { return s.n }

// Capacity returns the number of token positions the sequence's blocks can
// hold (Len plus reserved room).
func (s *Seq) Capacity() int { return len(s.blocks) * BlockSize }

// NewBlockPool returns a KV cache of numBlocks blocks shaped for m. Its
// memory is 2·Layers·KVDim·BlockSize·4 bytes per block.
func (m *Model) NewBlockPool(numBlocks int) *BlockPool {
	c := m.Cfg
	if numBlocks < 0 {
		numBlocks = 0
	}
	p := &BlockPool{
		cfg:     c,
		hs:      c.HeadSize(),
		kSize:   c.HeadSize() * BlockSize,
		vSize:   (c.HeadSize() + panelWidth - 1) / panelWidth * panelWidth * BlockSize,
		meta:    make([]blockMeta, numBlocks),
		cache:   make(map[uint64]int32),
		lruHead: -1,
		lruTail: -1,
	}
	p.layerStride = c.KVHeads * (p.kSize + p.vSize)
	p.blockStride = c.Layers * p.layerStride
	p.data = make([]float32, numBlocks*p.blockStride)
	p.free = make([]int32, numBlocks)
	for i := range p.free {
		p.free[i] = int32(numBlocks - 1 - i)
	}
	return p
}

// BlockBytes returns the memory of one block in bytes.
func (p *BlockPool) BlockBytes() int { return 4 * p.blockStride }

// Total returns the number of blocks in the pool.
func (p *BlockPool) Total() int { return len(p.meta) }

// Free returns the number of blocks Reserve can still hand out: unreferenced
// blocks, including cached prefix blocks (they are evictable).
func (p *BlockPool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + p.nEvictable
}

// Cached returns the number of blocks currently registered in the prefix cache.
func (p *BlockPool) Cached() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cache)
}

// NewSeq returns an empty sequence backed by p.
func (p *BlockPool) NewSeq() *Seq { return &Seq{pool: p} }

// ChainHash extends the hash chain by one block of tokens (0: no parent):
// the key the prefix cache finds a block by, so that two prompts share
// the blocks whose chains are equal.
func ChainHash(parent uint64, toks []int) uint64 {
	h := parent ^ 0xcbf29ce484222325
	for _, t := range toks {
		h ^= uint64(uint32(t))
		h *= 0x100000001b3
		h ^= h >> 31
	}
	h *= 0x9e3779b97f4a7c15
	if h == 0 { // 0 means "no parent"
		h = 1
	}
	return h
}

// AttachPrefix shares cached full blocks that match a prefix of tokens. The
// sequence must be empty. It returns how many tokens are now cached: a
// multiple of BlockSize and less than len(tokens), so at least one token is
// left to compute (its logits are needed).
func (p *BlockPool) AttachPrefix(s *Seq, tokens []int) int {
	p.checkSeq(s)
	if s.n != 0 || len(s.blocks) != 0 {
		panic("model: AttachPrefix on a non-empty sequence")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var parent uint64
	for i := 0; (i+1)*BlockSize < len(tokens); i++ {
		blk := tokens[i*BlockSize : (i+1)*BlockSize]
		h := ChainHash(parent, blk)
		b, ok := p.cache[h]
		if !ok || !p.meta[b].matches(parent, blk) {
			break
		}
		mb := &p.meta[b]
		if mb.ref == 0 {
			p.lruRemove(b)
		}
		mb.ref++
		s.blocks = append(s.blocks, b)
		s.n += BlockSize
		parent = h
	}
	return s.n
}

func (mb *blockMeta) matches(parent uint64, toks []int) bool {
	if mb.parent != parent {
		return false
	}
	for i, t := range toks {
		if mb.tokens[i] != int32(t) {
			return false
		}
	}
	return true
}

// Reserve makes room for n more tokens after Len(). It returns false, and
// reserves nothing, when the pool has too few free blocks; cached prefix
// blocks nobody references are evicted as needed.
func (p *BlockPool) Reserve(s *Seq, n int) bool {
	p.checkSeq(s)
	need := (s.n+n+BlockSize-1)/BlockSize - len(s.blocks)
	if need <= 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if need > len(p.free)+p.nEvictable {
		return false
	}
	for ; need > 0; need-- {
		var b int32
		if k := len(p.free); k > 0 {
			b = p.free[k-1]
			p.free = p.free[:k-1]
		} else {
			b = p.lruHead
			p.lruRemove(b)
			mb := &p.meta[b]
			delete(p.cache, mb.hash)
			mb.cached = false
		}
		p.meta[b].ref = 1
		s.blocks = append(s.blocks, b)
	}
	return true
}

// Publish registers s's full blocks holding tokens[:s.Len()] in the prefix
// cache so later prompts starting with the same tokens can share them.
// tokens must be the tokens the sequence was computed from. Blocks whose
// content is already cached elsewhere are left private.
func (p *BlockPool) Publish(s *Seq, tokens []int) {
	p.checkSeq(s)
	full := min(s.n, len(tokens)) / BlockSize
	p.mu.Lock()
	defer p.mu.Unlock()
	var parent uint64
	for i := 0; i < full; i++ {
		blk := tokens[i*BlockSize : (i+1)*BlockSize]
		h := ChainHash(parent, blk)
		b := s.blocks[i]
		mb := &p.meta[b]
		if !mb.cached {
			if _, dup := p.cache[h]; !dup {
				mb.cached = true
				mb.hash = h
				mb.parent = parent
				for j, t := range blk {
					mb.tokens[j] = int32(t)
				}
				p.cache[h] = b
			}
		}
		parent = h
	}
}

// Release drops s's references to its blocks: private blocks return to the
// free list, published ones become evictable cache entries. s is empty
// afterwards and may be reused. Release is idempotent.
//
// The blocks are released last first, so that of a chain the cache evicts
// the tail before the head: an eviction shortens the prefix a later prompt
// finds instead of cutting it at its first block (AttachPrefix matches from
// the start, and a chain without its head is found by no prompt). vLLM
// frees a request's blocks in the same order (SingleTypeKVCacheManager.free,
// vllm/v1/core/single_type_kv_cache_manager.py: "Free blocks in reverse
// order so that the tail blocks are freed first"); SGLang's radix cache
// evicts leaves first, to the same end.
func (p *BlockPool) Release(s *Seq) {
	p.checkSeq(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		mb := &p.meta[b]
		mb.ref--
		switch {
		case mb.ref > 0:
		case mb.ref < 0:
			panic(fmt.Sprintf("BUG: model: block %d released more often than referenced", b))
		case mb.cached:
			p.lruPush(b)
		default:
			p.free = append(p.free, b)
		}
	}
	s.blocks = s.blocks[:0]
	s.n = 0
}

func (p *BlockPool) checkSeq(s *Seq) {
	if s.pool != p {
		panic("model: sequence belongs to another BlockPool")
	}
}

func (p *BlockPool) lruPush(b int32) {
	mb := &p.meta[b]
	mb.prev, mb.next = p.lruTail, -1
	if p.lruTail >= 0 {
		p.meta[p.lruTail].next = b
	} else {
		p.lruHead = b
	}
	p.lruTail = b
	p.nEvictable++
}

func (p *BlockPool) lruRemove(b int32) {
	mb := &p.meta[b]
	if mb.prev >= 0 {
		p.meta[mb.prev].next = mb.next
	} else {
		p.lruHead = mb.next
	}
	if mb.next >= 0 {
		p.meta[mb.next].prev = mb.prev
	} else {
		p.lruTail = mb.prev
	}
	mb.prev, mb.next = -1, -1
	p.nEvictable--
}

// keys returns kv head g's keys in layer l of block b as a packed panel
// (see kernels.go) of BlockSize outputs over hs inputs: keys[d*16+t] is
// dimension d of the key at token t of the block. Scores of a query q
// against the block's 16 tokens are then one kern1x16(scores, q, keys, hs).
func (p *BlockPool) keys(b int32, l, g int) []float32 {
	off := int(b)*p.blockStride + l*p.layerStride + g*p.kSize
	return p.data[off : off+p.kSize : off+p.kSize]
}

// values returns kv head g's values in layer l of block b as ceil(hs/16)
// packed panels of 16 outputs over the block's 16 tokens:
// values[(d/16)*256+t*16+d%16] is dimension d of the value at token t.
func (p *BlockPool) values(b int32, l, g int) []float32 {
	off := int(b)*p.blockStride + l*p.layerStride + p.cfg.KVHeads*p.kSize + g*p.vSize
	return p.data[off : off+p.vSize : off+p.vSize]
}

// store writes the key and value of token slot t (< BlockSize) of block b.
func (p *BlockPool) store(b int32, l, g, t int, k, v []float32) {
	ks, vs := p.keys(b, l, g), p.values(b, l, g)
	for d, x := range k[:p.hs] {
		ks[d*BlockSize+t] = x
	}
	for d, x := range v[:p.hs] {
		vs[(d/panelWidth)*panelWidth*BlockSize+t*panelWidth+d%panelWidth] = x
	}
}
