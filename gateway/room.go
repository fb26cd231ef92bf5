package gateway

import "sync"

// Room: whether an upstream's prefix cache has room for a prompt beside
// the prompts it holds (docs/routing.md, "Room in the cache"). Placing a
// prompt where it does not fit, or sending a request of it where it does
// not, evicts a prompt the engine is still serving, whose next request
// misses and is computed again, evicting another.

// maxHomes is how many prompts an upstream's homes keep: the most
// recently sent. A cache holds a few long prompts; more short ones, of
// which the oldest then count for little.
const maxHomes = 32

// roomShare is the share of an engine's cache its prompts may fill: the
// rest is for the running requests' own tokens (questions, answers),
// cached too and evicted first.
const roomShare = 7.0 / 8

// home is a prompt an upstream was sent: the key of its first message
// (prefix chain), its tokens (the gateway's estimate) and its upstream's
// count of computed tokens when it was last sent (its mark).
type home struct {
	key    uint64
	tokens int
	mark   uint64
}

// homes is an upstream's most recently sent prompts, for room. Its
// methods take its mutex and allocate nothing.
type homes struct {
	mu sync.Mutex
	n  int
	e  [maxHomes]home
}

// note records that a prompt of tokens whose first message's key is key
// was sent at mark: its entry is updated, else it takes a free one, else
// the one of the oldest mark.
func (h *homes) note(key uint64, tokens int, mark uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := 0
	for i := range h.n {
		if h.e[i].key == key {
			h.e[i].tokens, h.e[i].mark = tokens, mark
			return
		}
		if h.e[i].mark < h.e[oldest].mark {
			oldest = i
		}
	}
	if h.n < maxHomes {
		oldest = h.n
		h.n++
	}
	h.e[oldest] = home{key: key, tokens: tokens, mark: mark}
}

// held is the tokens of the prompts other than key still held at count
// (the upstream's computed tokens, read before the call): those sent less
// than capacity tokens ago, or since count was read (a mark past it).
func (h *homes) held(key, count, capacity uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var t int
	for _, e := range h.e[:h.n] {
		if e.key != key && (e.mark >= count || count-e.mark < capacity) {
			t += e.tokens
		}
	}
	return t
}

// fits says u's prefix cache has room for a prompt of tokens (the
// estimate's) whose first message's key is key beside the other prompts it
// holds, within roomShare of its size as its engine last reported it (in
// the engine's tokens: taken in the estimate's by the ratio u's model has
// learned). Without a reported size every prompt fits.
func (u *Upstream) fits(key uint64, tokens int) bool {
	size := u.CacheTokens()
	if size <= 0 {
		return true
	}
	capacity := float64(size) / u.model.TokenRatio()
	return float64(u.homes.held(key, u.computed.Load(), uint64(capacity))+tokens) <= roomShare*capacity
}
