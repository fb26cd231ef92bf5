// Package model is ttftlens' reference CPU engine: a small decoder-only
// transformer in pure Go with llama2.c semantics (RMSNorm, rotary position
// embeddings, grouped-query attention over a paged KV cache, SwiGLU MLP),
// tensor-parallel ranks that synchronise at every layer, a prefix cache, and
// byte-level BPE tokenizers.
//
// The computation is real: prefill, decode, rank synchronisation and prefix
// cache hits take the time the arithmetic takes, which is what the proxy's
// demonstrations rely on.
package model

import (
	"errors"
	"fmt"
)

// Config is the shape of a model. Field meanings follow llama2.c's Config.
type Config struct {
	Dim       int // residual stream width
	HiddenDim int // MLP hidden width
	Layers    int // transformer blocks
	Heads     int // query heads; Dim must be a multiple of Heads
	KVHeads   int // key/value heads (grouped-query attention); divides Heads
	Vocab     int // vocabulary size
	MaxSeq    int // trained context length; callers should not run sequences past it

	// SharedClassifier reports whether the output classifier reuses the
	// token embedding table (llama2.c: positive vocab_size in the header).
	SharedClassifier bool
}

// DefaultConfig is the built-in model: the stories15M shape (dim 288,
// 6 layers, 6 heads, hidden 768) with a 4096-token vocabulary and a separate
// classifier (the same matrix shape, and so the same work per token, as a
// shared one), about 8.4M parameters. Seeded, its embedding and classifier
// hold the embedded corpus's bigram table, so sampled text is corpus words.
// It builds in well under a second and decodes a few hundred tokens/s on
// two cores.
func DefaultConfig() Config {
	return Config{
		Dim:              288,
		HiddenDim:        768,
		Layers:           6,
		Heads:            6,
		KVHeads:          6,
		Vocab:            4096,
		MaxSeq:           2048,
		SharedClassifier: false,
	}
}

// HeadSize is Dim/Heads.
func (c Config) HeadSize() int { return c.Dim / c.Heads }

// KVDim is the width of the keys (and values) of one token in one layer.
func (c Config) KVDim() int { return c.KVHeads * c.HeadSize() }

// Params returns the number of parameters (the classifier counted once when shared).
func (c Config) Params() int {
	hs := c.HeadSize()
	perLayer := 2*c.Dim + c.Dim*c.Heads*hs + 2*c.Dim*c.KVDim() + c.Heads*hs*c.Dim + 3*c.Dim*c.HiddenDim
	n := c.Vocab*c.Dim + c.Layers*perLayer + c.Dim
	if !c.SharedClassifier {
		n += c.Vocab * c.Dim
	}
	return n
}

// Validate reports whether the configuration describes a model this package can run.
func (c Config) Validate() error {
	switch {
	case c.Dim <= 0 || c.HiddenDim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Vocab <= 0 || c.MaxSeq <= 0:
		return fmt.Errorf("model: config has a non-positive size: %+v", c)
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("model: dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	case c.HeadSize()%2 != 0:
		return errors.New("model: head size must be even for rotary embeddings")
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("model: kv heads %d must divide heads %d", c.KVHeads, c.Heads)
	}
	return nil
}
