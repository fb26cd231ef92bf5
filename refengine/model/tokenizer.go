package model

import (
	"bufio"
	"container/heap"
	_ "embed"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Tokenizer turns text into token ids and back. Implementations are
// immutable and safe for concurrent use.
type Tokenizer interface {
	// Encode returns the tokens of text, without BOS. Like llama2.c (and
	// sentencepiece) it prepends a dummy space to non-empty text.
	Encode(text string) []int
	// Decode returns the text piece of token id that follows token prev.
	// After BOS the leading space of a piece is stripped (it is the dummy
	// prefix), so concatenating Decode(prev, id) over BOS, Encode(text)
	// yields text. Byte-fallback tokens decode to their raw byte, which may
	// be an incomplete UTF-8 sequence until the following pieces arrive.
	Decode(prev, id int) string
	BOS() int
	EOS() int
	Vocab() int
}

// bpeTokenizer is llama2.c's tokenizer: a vocabulary of strings with merge
// scores, score-driven pair merging, and byte fallback to "<0xXX>" tokens.
type bpeTokenizer struct {
	vocab   []string
	scores  []float32
	lookup  map[string]int
	pieces  []string // decoded piece of every id (byte tokens as raw bytes)
	byteID  [256]int
	space   int // id of " " (the dummy prefix), or -1
	bos     int
	eos     int
	maxTLen int
}

func newBPETokenizer(vocab []string, scores []float32, maxTLen int) *bpeTokenizer {
	t := &bpeTokenizer{
		vocab:   vocab,
		scores:  scores,
		lookup:  make(map[string]int, len(vocab)),
		pieces:  make([]string, len(vocab)),
		space:   -1,
		bos:     1,
		eos:     2,
		maxTLen: maxTLen,
	}
	for i := range t.byteID {
		t.byteID[i] = i + 3 // llama2.c's convention when "<0xXX>" is missing
	}
	for id, s := range vocab {
		if _, dup := t.lookup[s]; !dup {
			t.lookup[s] = id
		}
		t.pieces[id] = s
		if len(s) == 6 && s[:3] == "<0x" && s[5] == '>' {
			if b, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
				t.pieces[id] = string([]byte{byte(b)})
				t.byteID[b] = id
			}
		}
	}
	if id, ok := t.lookup[" "]; ok {
		t.space = id
	}
	return t
}

func (t *bpeTokenizer) BOS() int   { return t.bos }
func (t *bpeTokenizer) EOS() int   { return t.eos }
func (t *bpeTokenizer) Vocab() int { return len(t.vocab) }

func (t *bpeTokenizer) Decode(prev, id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	p := t.pieces[id]
	if prev == t.bos && len(p) > 0 && p[0] == ' ' && p == t.vocab[id] {
		p = p[1:]
	}
	return p
}

// Encode follows llama2.c's encode: dummy prefix, one token per UTF-8 code
// point found in the vocabulary (else one byte token per byte), then
// repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary entry (the leftmost on ties). The merge loop
// uses a heap, so it is O(n log n) instead of run.c's O(n²), with the same
// result.
func (t *bpeTokenizer) Encode(text string) []int {
	if text == "" {
		return nil
	}
	toks := make([]int, 0, len(text)+1)
	if t.space >= 0 {
		toks = append(toks, t.space)
	}
	for i := 0; i < len(text); {
		j := i + 1
		for j < len(text) && text[j]&0xC0 == 0x80 && j-i < 4 {
			j++
		}
		if id, ok := t.lookup[text[i:j]]; ok {
			toks = append(toks, id)
		} else {
			for k := i; k < j; k++ {
				toks = append(toks, t.byteID[text[k]])
			}
		}
		i = j
	}
	return t.merge(toks)
}

type mergeCand struct {
	score       float32
	left, right int // node indexes
	lid, rid    int // token ids when pushed
	id          int // merged token
}

type mergeHeap []mergeCand

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].left < h[j].left
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (t *bpeTokenizer) merge(toks []int) []int {
	n := len(toks)
	next := make([]int, n)
	prev := make([]int, n)
	for i := range toks {
		next[i], prev[i] = i+1, i-1
	}
	next[n-1] = -1
	var buf []byte
	h := mergeHeap{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		buf = append(append(buf[:0], t.vocab[toks[l]]...), t.vocab[toks[r]]...)
		if id, ok := t.lookup[string(buf)]; ok {
			heap.Push(&h, mergeCand{t.scores[id], l, r, toks[l], toks[r], id})
		}
	}
	for i := 0; i+1 < n; i++ {
		try(i, i+1)
	}
	for h.Len() > 0 {
		c := heap.Pop(&h).(mergeCand)
		if toks[c.left] != c.lid || toks[c.right] != c.rid || next[c.left] != c.right {
			continue // stale: one side was merged since
		}
		toks[c.left] = c.id
		toks[c.right] = -1
		nr := next[c.right]
		next[c.left] = nr
		if nr >= 0 {
			prev[nr] = c.left
		}
		try(prev[c.left], c.left)
		try(c.left, nr)
	}
	out := toks[:0]
	for i := 0; i >= 0; i = next[i] {
		out = append(out, toks[i])
	}
	return out
}

// LoadTokenizer reads a llama2.c tokenizer.bin holding vocab entries: an
// int32 max_token_length, then per token a float32 score, an int32 length
// and that many bytes. BOS is 1 and EOS is 2, as in llama2.c.
func LoadTokenizer(path string, vocab int) (Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: cannot open tokenizer: %w", err)
	}
	defer f.Close()
	t, err := readTokenizer(bufio.NewReader(f), vocab)
	if err != nil {
		return nil, fmt.Errorf("model: tokenizer %s: %w", path, err)
	}
	return t, nil
}

func readTokenizer(r io.Reader, n int) (*bpeTokenizer, error) {
	if n < 3 {
		return nil, fmt.Errorf("vocab size %d too small", n)
	}
	var maxLen int32
	if err := binary.Read(r, binary.LittleEndian, &maxLen); err != nil {
		return nil, fmt.Errorf("cannot read max_token_length: %w", err)
	}
	vocab := make([]string, n)
	scores := make([]float32, n)
	for i := range vocab {
		var hdr struct {
			Score float32
			Len   int32
		}
		if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
			return nil, fmt.Errorf("cannot read token %d: %w", i, err)
		}
		if hdr.Len < 0 || hdr.Len > 1<<16 {
			return nil, fmt.Errorf("token %d has length %d", i, hdr.Len)
		}
		b := make([]byte, hdr.Len)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("cannot read token %d: %w", i, err)
		}
		vocab[i], scores[i] = string(b), hdr.Score
	}
	return newBPETokenizer(vocab, scores, int(maxLen)), nil
}

// writeTokenizer writes t in tokenizer.bin format.
func writeTokenizer(w io.Writer, t *bpeTokenizer) error {
	bw := bufio.NewWriter(w)
	maxLen := 0
	for _, s := range t.vocab {
		maxLen = max(maxLen, len(s))
	}
	binary.Write(bw, binary.LittleEndian, int32(maxLen))
	for i, s := range t.vocab {
		binary.Write(bw, binary.LittleEndian, t.scores[i])
		binary.Write(bw, binary.LittleEndian, int32(len(s)))
		bw.WriteString(s)
	}
	return bw.Flush()
}

//go:embed corpus.txt
var corpus string

var defaultTokenizers sync.Map // vocab size -> *bpeTokenizer

// DefaultTokenizer returns the byte-level BPE tokenizer of the seeded
// models: ids 0-2 are <unk>, <s> (BOS) and </s> (EOS), 3-258 the byte
// tokens <0x00>..<0xFF>, then tab, newline and printable ASCII, then merges
// learned deterministically from an embedded English text until cfg.Vocab
// entries exist. Any UTF-8 (indeed any byte string) round-trips through
// Encode and Decode. cfg.Vocab must be at least 356. The result is cached
// and shared.
func DefaultTokenizer(cfg Config) Tokenizer {
	if t, ok := defaultTokenizers.Load(cfg.Vocab); ok {
		return t.(*bpeTokenizer)
	}
	t, _ := defaultTokenizers.LoadOrStore(cfg.Vocab, trainTokenizer(corpus, cfg.Vocab))
	return t.(*bpeTokenizer)
}

// baseVocab returns the fixed part of the default vocabulary.
func baseVocab() []string {
	v := []string{"<unk>", "<s>", "</s>"}
	for b := 0; b < 256; b++ {
		v = append(v, fmt.Sprintf("<0x%02X>", b))
	}
	v = append(v, "\t", "\n")
	for c := byte(' '); c <= '~'; c++ {
		v = append(v, string(c))
	}
	return v
}

// charClass groups bytes for pre-tokenization: letters, digits, others.
func charClass(c byte) int {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return 1
	case c >= '0' && c <= '9':
		return 2
	}
	return 3
}

// splitWords cuts text into training words: a run of letters or digits, or
// a single other byte, each taking one preceding space with it.
func splitWords(text string) []string {
	var words []string
	start := 0
	for i := 1; i <= len(text); i++ {
		if i < len(text) {
			c, p := text[i], text[i-1]
			cont := charClass(c) == charClass(p) && charClass(c) != 3 ||
				p == ' ' && i-1 == start && c != ' '
			if cont {
				continue
			}
		}
		words = append(words, text[start:i])
		start = i
	}
	return words
}

type pairKey struct{ a, b int32 }

type pairCount struct {
	n int
	p pairKey
}

type pairHeap []pairCount

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].n != h[j].n {
		return h[i].n > h[j].n
	}
	if h[i].p.a != h[j].p.a {
		return h[i].p.a < h[j].p.a
	}
	return h[i].p.b < h[j].p.b
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairCount)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// trainTokenizer learns BPE merges (Sennrich et al.) from text until the
// vocabulary has size entries: first within words, then, when the words run
// out of pairs, across words within lines (multi-word tokens). Merge i gets
// score -(i+1), so llama2.c's score-driven encoder applies earlier merges
// first. Should the text run out of pairs altogether, the rest is filled
// with unreachable "<unusedN>" entries.
func trainTokenizer(text string, size int) *bpeTokenizer {
	tr := &bpeTrainer{vocab: baseVocab(), size: size}
	if size < len(tr.vocab) {
		panic(fmt.Sprintf("model: default tokenizer needs a vocabulary of at least %d, got %d", len(tr.vocab), size))
	}
	tr.scores = make([]float32, len(tr.vocab), size)
	tr.ids = make(map[string]int32, size)
	for i, s := range tr.vocab {
		tr.ids[s] = int32(i)
	}
	tr.learn(splitWords(text))
	if len(tr.vocab) < size {
		tr.learn(strings.SplitAfter(text, "\n"))
	}
	for i := 0; len(tr.vocab) < size; i++ {
		tr.vocab = append(tr.vocab, fmt.Sprintf("<unused%d>", i))
		tr.scores = append(tr.scores, -1e9)
	}
	return newBPETokenizer(tr.vocab, tr.scores, 0)
}

type bpeTrainer struct {
	vocab  []string
	scores []float32
	ids    map[string]int32
	size   int
	merges int
}

// learn adds merges over the given pieces of training text, each first
// segmented with the merges learned so far.
func (tr *bpeTrainer) learn(pieces []string) {
	cur := newBPETokenizer(tr.vocab, tr.scores, 0)
	counts := map[string]int{}
	for _, w := range pieces {
		counts[w]++
	}
	uniq := make([]string, 0, len(counts))
	for w := range counts {
		uniq = append(uniq, w)
	}
	slices.Sort(uniq)
	words := make([][]int32, len(uniq))
	freq := make([]int, len(uniq))
	pairs := map[pairKey]int{}
	where := map[pairKey][]int32{}
	for wi, w := range uniq {
		freq[wi] = counts[w]
		var sym []int32
		if w != "" {
			chars := make([]int, 0, len(w))
			for k := 0; k < len(w); k++ {
				id, ok := cur.lookup[w[k:k+1]]
				if !ok {
					id = cur.byteID[w[k]]
				}
				chars = append(chars, id)
			}
			for _, id := range cur.merge(chars) {
				sym = append(sym, int32(id))
			}
		}
		words[wi] = sym
		for k := 0; k+1 < len(sym); k++ {
			pk := pairKey{sym[k], sym[k+1]}
			pairs[pk] += freq[wi]
			where[pk] = append(where[pk], int32(wi))
		}
	}
	h := make(pairHeap, 0, len(pairs))
	for pk, n := range pairs {
		h = append(h, pairCount{n, pk})
	}
	heap.Init(&h)
	seen := make([]int, len(words)) // merge stamp, to visit each word once per merge
	for len(tr.vocab) < tr.size && h.Len() > 0 {
		top := heap.Pop(&h).(pairCount)
		if pairs[top.p] != top.n || top.n == 0 {
			continue // stale entry
		}
		pk := top.p
		s := tr.vocab[pk.a] + tr.vocab[pk.b]
		id, exists := tr.ids[s]
		if !exists {
			id = int32(len(tr.vocab))
			tr.ids[s] = id
			tr.vocab = append(tr.vocab, s)
			tr.scores = append(tr.scores, float32(-(tr.merges + 1)))
		}
		tr.merges++
		changed := map[pairKey]struct{}{}
		add := func(p pairKey, n int, wi int32) {
			pairs[p] += n
			if n > 0 {
				where[p] = append(where[p], wi)
			}
			changed[p] = struct{}{}
		}
		for _, wi := range where[pk] {
			if seen[wi] == tr.merges {
				continue
			}
			seen[wi] = tr.merges
			sym, f := words[wi], freq[wi]
			out := sym[:0]
			for k := 0; k < len(sym); k++ {
				if k+1 < len(sym) && sym[k] == pk.a && sym[k+1] == pk.b {
					if len(out) > 0 {
						add(pairKey{out[len(out)-1], sym[k]}, -f, wi)
						add(pairKey{out[len(out)-1], id}, f, wi)
					}
					if k+2 < len(sym) {
						// A following occurrence of pk, if any, undoes
						// this on its own iteration.
						add(pairKey{sym[k+1], sym[k+2]}, -f, wi)
						add(pairKey{id, sym[k+2]}, f, wi)
					}
					pairs[pk] -= f
					out = append(out, id)
					k++
					continue
				}
				out = append(out, sym[k])
			}
			words[wi] = out
		}
		delete(where, pk)
		delete(pairs, pk)
		keys := make([]pairKey, 0, len(changed))
		for c := range changed {
			keys = append(keys, c)
		}
		for _, c := range keys {
			if n := pairs[c]; n > 0 {
				heap.Push(&h, pairCount{n, c})
			}
		}
	}
}
