package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/refengine/model"
)

func TestLongestWithin(t *testing.T) {
	tests := []struct {
		name          string
		limit, target int
		size          func(int) int
		want          int
	}{
		{"two tokens a word", 100, 10, func(n int) int { return 2 * n }, 5},
		{"between two sizes", 100, 11, func(n int) int { return 2 * n }, 5},
		{"the limit first", 50, 100, func(n int) int { return n }, 50},
		{"not even one word", 10, 1, func(n int) int { return 3 * n }, 1},
		{"steps", 1000, 700, func(n int) int { return n + n/10*3 }, 539},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := longestWithin(tc.limit, tc.target, tc.size); got != tc.want {
				t.Errorf("longestWithin(%d, %d) = %d, want %d", tc.limit, tc.target, got, tc.want)
			}
		})
	}
}

// TestSystemPrompts: eight system prompts, each within a word of its size
// in the reference tokenizer's tokens, spread from 1,000 to 1,900, no two
// alike in their first block; the same for the same seed.
func TestSystemPrompts(t *testing.T) {
	tok := model.DefaultTokenizer(model.DefaultConfig())
	texts, sizes := systemPrompts(tok, 1)
	targets := systemTargets()
	if len(texts) != numSystems || targets[0] != minSystemTokens || targets[numSystems-1] != maxSystemTokens {
		t.Fatalf("%d prompts, targets %v", len(texts), targets)
	}
	for i, text := range texts {
		if sizes[i] > targets[i] || sizes[i] < targets[i]-8 || len(tok.Encode(text)) != sizes[i] {
			t.Errorf("prompt %d: %d tokens (said %d), want %d or a word less", i, len(tok.Encode(text)), sizes[i], targets[i])
		}
		for j := range i {
			if texts[j][:64] == text[:64] {
				t.Errorf("prompts %d and %d begin alike: %q", j, i, text[:64])
			}
		}
	}
	again, _ := systemPrompts(tok, 1)
	other, _ := systemPrompts(tok, 2)
	if !slices.Equal(texts, again) || slices.Equal(texts, other) {
		t.Error("the system prompts are not a function of the seed")
	}
}

// TestRequests: the same seed draws the same requests, another seed
// others; every user keeps to one application, every application has
// users; and the longest prompt, in the reference engine's chat template,
// leaves room for the answer in the model's context.
func TestRequests(t *testing.T) {
	a, b, c := requests(7, 500), requests(7, 500), requests(8, 500)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Fatal("the requests are not a function of the seed")
	}
	tok := model.DefaultTokenizer(model.DefaultConfig())
	systems, _ := systemPrompts(tok, 7)
	ps, qs := prompts(systems, a), prompts(systems, b)
	seen := map[int]bool{}
	longest := 0
	for i, r := range a {
		if r.system != r.user%numSystems {
			t.Fatalf("request %d: user %d on application %d", i, r.user, r.system)
		}
		seen[r.system] = true
		if !bytes.Equal(ps[i].Messages, qs[i].Messages) {
			t.Fatalf("request %d rendered twice differently", i)
		}
		if q := len(tok.Encode(r.question)); q > 48 {
			t.Errorf("request %d: a question of %d tokens: %q", i, q, r.question)
		}
		chat := "<|system|>\n" + systems[r.system] + "\n<|user|>\n" + r.question + "\n<|assistant|>\n"
		longest = max(longest, len(tok.Encode(chat))+1) // and BOS
	}
	if len(seen) != numSystems {
		t.Errorf("%d applications used of %d", len(seen), numSystems)
	}
	const answer = 16
	if ctx := model.DefaultConfig().MaxSeq; longest+answer > ctx {
		t.Errorf("the longest prompt has %d tokens: with %d of answer it passes the context of %d", longest, answer, ctx)
	}
	if !strings.Contains(string(ps[0].Messages), `"role":"system"`) {
		t.Errorf("prompt: %s", ps[0].Messages[:80])
	}
}
