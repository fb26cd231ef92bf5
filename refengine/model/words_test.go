package model

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
)

// corpusWords splits text into lowercase words: runs of letters.
func corpusWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) })
}

// TestDefaultModelSpeaksCorpusWords: sampled as the API samples by default
// (temperature 1, top_p 1), the default model (the engine's default seed)
// answers in words of the embedded corpus, and in many of them.
func TestDefaultModelSpeaksCorpusWords(t *testing.T) {
	const answerTokens = 200
	cfg := DefaultConfig()
	m, err := NewSeeded(cfg, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tk := DefaultTokenizer(cfg)
	known := map[string]bool{}
	for _, w := range corpusWords(corpus) {
		known[w] = true
	}
	pool := m.NewBlockPool(64)
	for i, prompt := range []string{
		"Tell me a story",
		"<|user|>\nHow does a cache work?\n<|assistant|>\n",
		"zqx 42 ??",
	} {
		t.Run(prompt, func(t *testing.T) {
			toks := append([]int{tk.BOS()}, tk.Encode(prompt)...)
			s := pool.NewSeq()
			defer pool.Release(s)
			if !pool.Reserve(s, len(toks)+answerTokens) {
				t.Fatal("Reserve failed")
			}
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			lg := make([]float32, cfg.Vocab)
			var answer strings.Builder
			for range answerTokens {
				m.Step([]StepEntry{{Seq: s, Tokens: toks, Logits: lg}})
				next := Sample(lg, 1, 1, rng)
				answer.WriteString(tk.Decode(toks[len(toks)-1], next))
				toks = []int{next}
			}
			words := corpusWords(answer.String())
			inCorpus, distinct := 0, map[string]bool{}
			for _, w := range words {
				if known[w] {
					inCorpus++
				}
				distinct[w] = true
			}
			if len(words) < answerTokens/2 || inCorpus*10 < len(words)*8 || len(distinct) < 20 {
				t.Errorf("%d words, %d in the corpus, %d distinct; want at least %d, 80%%, 20:\n%q",
					len(words), inCorpus, len(distinct), answerTokens/2, answer.String())
			}
		})
	}
}
