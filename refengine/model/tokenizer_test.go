package model

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func decodeAll(tk Tokenizer, ids []int) string {
	var sb strings.Builder
	prev := tk.BOS()
	for _, id := range ids {
		sb.WriteString(tk.Decode(prev, id))
		prev = id
	}
	return sb.String()
}

func TestDefaultTokenizerRoundTrip(t *testing.T) {
	tk := DefaultTokenizer(DefaultConfig())
	if tk.Vocab() != DefaultConfig().Vocab {
		t.Fatalf("Vocab() = %d, want %d", tk.Vocab(), DefaultConfig().Vocab)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	cases := []string{
		"", "a", " ", "  leading spaces", "Hello, world!", "Once upon a time, there was a little girl named Lily.",
		"tabs\tand\nnewlines\r\n", "ünïcödé — 日本語 🙂 emoji", "\x00\x01 control", "<0x41> looks like a byte token",
		corpus[:2000],
	}
	for i := 0; i < 50; i++ {
		var b []rune
		for j := rng.IntN(40); j > 0; j-- {
			switch rng.IntN(3) {
			case 0:
				b = append(b, rune(' '+rng.IntN(95)))
			case 1:
				b = append(b, rune(0x80+rng.IntN(0x700)))
			default:
				b = append(b, rune(0x1000+rng.IntN(0x10000)))
			}
		}
		s := string(b)
		if utf8.ValidString(s) {
			cases = append(cases, s)
		}
	}
	for _, s := range cases {
		ids := tk.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tk.Vocab() {
				t.Fatalf("Encode(%q) produced id %d", s, id)
			}
		}
		if got := decodeAll(tk, ids); got != s {
			t.Errorf("round trip of %q = %q (ids %v)", s, got, ids)
		}
	}
	// The learned merges compress English well.
	text := "The children walked home through the park as the sun went down."
	if n := len(tk.Encode(text)); n > len(text)/3 {
		t.Errorf("Encode(%q) = %d tokens; merges look ineffective", text, n)
	}
}

// naiveEncode is run.c's O(n²) merge loop, the reference for bpeTokenizer.merge.
func naiveEncode(t *bpeTokenizer, toks []int) []int {
	for {
		best, bestID, bestIdx := float32(-1e10), -1, -1
		for i := 0; i+1 < len(toks); i++ {
			if id, ok := t.lookup[t.vocab[toks[i]]+t.vocab[toks[i+1]]]; ok && t.scores[id] > best {
				best, bestID, bestIdx = t.scores[id], id, i
			}
		}
		if bestIdx < 0 {
			return toks
		}
		toks[bestIdx] = bestID
		toks = append(toks[:bestIdx+1], toks[bestIdx+2:]...)
	}
}

func TestEncodeMatchesRunC(t *testing.T) {
	tk := DefaultTokenizer(DefaultConfig()).(*bpeTokenizer)
	for _, s := range []string{"Hello world", corpus[:3000], "aaaaaaaaaaaa bbbb", "the the the then there"} {
		got := tk.Encode(s)
		// Build the pre-merge sequence the same way Encode does.
		pre := []int{tk.space}
		for _, c := range []byte(s) {
			if id, ok := tk.lookup[string([]byte{c})]; ok && c < 0x80 {
				pre = append(pre, id)
			} else {
				pre = append(pre, tk.byteID[c])
			}
		}
		want := naiveEncode(tk, pre)
		if len(got) != len(want) {
			t.Fatalf("Encode(%.20q): %d tokens, run.c merge gives %d", s, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Encode(%.20q)[%d] = %d, run.c merge gives %d", s, i, got[i], want[i])
			}
		}
	}
}

func TestTokenizerFileRoundTrip(t *testing.T) {
	tk := DefaultTokenizer(DefaultConfig()).(*bpeTokenizer)
	var buf bytes.Buffer
	if err := writeTokenizer(&buf, tk); err != nil {
		t.Fatal(err)
	}
	loaded, err := readTokenizer(&buf, tk.Vocab())
	if err != nil {
		t.Fatal(err)
	}
	s := "A tokenizer.bin written and read back encodes the same: naïve café."
	a, b := tk.Encode(s), loaded.Encode(s)
	if len(a) != len(b) {
		t.Fatalf("loaded tokenizer: %v, want %v", b, a)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("loaded tokenizer: %v, want %v", b, a)
		}
	}
	if got := decodeAll(loaded, b); got != s {
		t.Errorf("loaded round trip = %q", got)
	}
	if loaded.BOS() != 1 || loaded.EOS() != 2 {
		t.Errorf("BOS/EOS = %d/%d, want 1/2", loaded.BOS(), loaded.EOS())
	}
}

// TestDefaultTokenizerIsLearned: the default vocabulary is filled by merges
// learned from the embedded text, with no "<unusedN>" filler, and comes out
// the same on every training, so a token id means the same in every run.
func TestDefaultTokenizerIsLearned(t *testing.T) {
	size := DefaultConfig().Vocab
	a, b := trainTokenizer(corpus, size), trainTokenizer(corpus, size)
	if len(a.vocab) != size || len(b.vocab) != size {
		t.Fatalf("vocabularies of %d and %d entries, want %d", len(a.vocab), len(b.vocab), size)
	}
	for i, s := range a.vocab {
		if strings.HasPrefix(s, "<unused") {
			t.Fatalf("entry %d is the filler %q: the text ran out of pairs to merge", i, s)
		}
		if b.vocab[i] != s || b.scores[i] != a.scores[i] {
			t.Fatalf("entry %d: %q (score %g), then %q (score %g): training is not deterministic", i, s, a.scores[i], b.vocab[i], b.scores[i])
		}
	}
}
