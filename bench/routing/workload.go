package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// The workload: many users of eight applications, each application with
// its own long system prompt, each request one user's short question.
const (
	numSystems = 8
	// The system prompts' sizes in the reference tokenizer's tokens, spread
	// evenly from the first to the last: a system prompt, a question and
	// the answer fit the reference model's 2,048-token context.
	minSystemTokens = 1000
	maxSystemTokens = 1900
	// numUsers share the applications, numUsers/numSystems each.
	numUsers = 1000
)

// Words of the generated text: common English, so that the reference
// tokenizer (trained on English) takes each for a token or two.
var textWords = strings.Fields(`the of and to in is you that it he was for on are as with his they at be
this have from or one had by word but not what all were we when your can said there use an each which she
do how their if will up other about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been call who oil its now find
long down day did get come made may part answer question rule order tool policy account customer ticket
refund invoice shipping product manual section step check verify escalate reply polite short clear`)

// systemTargets returns the sizes of the system prompts, in tokens.
func systemTargets() []int {
	t := make([]int, numSystems)
	for i := range t {
		t[i] = minSystemTokens + i*(maxSystemTokens-minSystemTokens)/(numSystems-1)
	}
	return t
}

// systemPrompts returns the eight system prompts, each the longest run of
// generated words (from seed) whose tokens do not pass its target size, and
// their sizes in tok's tokens.
func systemPrompts(tok model.Tokenizer, seed uint64) ([]string, []int) {
	targets := systemTargets()
	texts, sizes := make([]string, len(targets)), make([]int, len(targets))
	for i, target := range targets {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		// Every word is at least one token: target words are enough.
		words := make([]string, target)
		words[0] = fmt.Sprintf("You are the assistant of application %d.", i+1)
		for j := 1; j < len(words); j++ {
			words[j] = textWords[rng.IntN(len(textWords))]
		}
		n := longestWithin(len(words), target, func(n int) int { return len(tok.Encode(strings.Join(words[:n], " "))) })
		texts[i] = strings.Join(words[:n], " ")
		sizes[i] = len(tok.Encode(texts[i]))
	}
	return texts, sizes
}

// longestWithin returns the largest n in [1, limit] with size(n) ≤ target
// (1 when none is), for a size that does not fall as n grows: a binary
// search, so a 2,000-token prompt is tokenized about eleven times.
func longestWithin(limit, target int, size func(int) int) int {
	lo, hi := 1, limit // size(lo) ≤ target is assumed, hi is a candidate
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if size(mid) <= target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// request is one request of the workload: a user of one application.
type request struct {
	user, system int
	question     string
}

// requests draws n requests from seed: a user at random (each user always
// uses the same application, user mod numSystems) and a short question.
func requests(seed uint64, n int) []request {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]request, n)
	for i := range out {
		u := rng.IntN(numUsers)
		words := make([]string, 6+rng.IntN(7))
		for j := range words {
			words[j] = textWords[rng.IntN(len(textWords))]
		}
		out[i] = request{user: u, system: u % numSystems,
			question: fmt.Sprintf("I am user %d. How do I %s?", u, strings.Join(words, " "))}
	}
	return out
}

// prompts renders the requests as the probe's chat prompts: the system
// prompt, then the question.
func prompts(systems []string, reqs []request) []bench.Prompt {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	out := make([]bench.Prompt, len(reqs))
	for i, r := range reqs {
		b, err := json.Marshal([]message{{"system", systems[r.system]}, {"user", r.question}})
		if err != nil {
			panic("BUG: " + err.Error()) // strings only
		}
		out[i] = bench.Prompt{Messages: b}
	}
	return out
}
