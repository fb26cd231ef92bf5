package predict

import "time"

// Part is one part of the time to first token after routing, named and
// ordered as the request clock's stages are (ARCHITECTURE.md, "The request
// clock and the stages"); gateway and route come before the choice of an
// upstream and are not predicted.
type Part uint8

// The parts.
const (
	Queue       Part = iota // the admission queue's wait and the engine's queue (load, unread)
	Preparation             // the engine's recv, tokenize, media
	Prefill                 // the engine's prefill
	FirstDecode             // the engine's first decode step and emit
	// Unattributed is what the engine did not account for: the network,
	// for an engine that splits its time; its whole window past the
	// proxy's send (preparation, prefill, first decode, the network) for
	// one that reports no split.
	Unattributed
	Transport // the proxy's send and its handing of the first token to the client
	NumParts
)

var partNames = [NumParts]string{"queue", "preparation", "prefill", "first_decode", "unattributed", "transport"}

// String is the part's name: the stage's (stages.Stage.String).
func (p Part) String() string {
	if p < NumParts {
		return partNames[p]
	}
	return "part?"
}

// Parts are durations by part.
type Parts [NumParts]time.Duration

// Sum is the parts' total.
func (p *Parts) Sum() time.Duration {
	var s time.Duration
	for _, d := range p {
		s += d
	}
	return s
}

// Load is what an upstream had on it when a request was routed there.
type Load struct {
	// Waiting is the requests ahead at the engine: its own waiting count
	// as last scraped, blended with this replica's requests since the
	// scrape as least_load blends them (gateway's loadKey: those sent or
	// queued here since count as waiting). Read only when EngineKnown.
	Waiting int64
	// EngineKnown says the engine's load was scraped.
	EngineKnown bool
	// InFlight is this replica's requests on the upstream, queued for it
	// or admitted and not ended (the gateway's Upstream.PredictLoad: its
	// outstanding requests; with share_routing, the other replicas' as
	// they last published them too), the new one not counted.
	InFlight int64
	// Backlog is the engine time this replica has sent the upstream that
	// is predicted not done yet: the predicted preparation and prefill of
	// the requests it routed there, run one after another from when each
	// was routed (or the last was predicted done). The requests ahead in
	// time, not in number: a miss ahead holds a request longer than a
	// hit does.
	Backlog time.Duration
	// Ahead is how long the requests ahead in their prefill are predicted
	// to hold a request routed now: this replica's streamed requests on
	// the upstream that have no first token yet, until the latest of their
	// predicted first tokens, or, once the oldest of them is past its
	// prediction, as long again as it has taken so far (Prefilling.Wait).
	// The queue is predicted at least this long.
	Ahead time.Duration
}

// Idle says nothing was ahead of a request routed with load: nothing of
// the replicas' in flight on the upstream, and none waiting at the engine
// when its load is known.
func (l Load) Idle() bool {
	return l.InFlight <= 0 && (!l.EngineKnown || l.Waiting <= 0)
}

// Expected is what the prefix index expects of an upstream's prefix cache
// for a request.
type Expected struct {
	// Cached is the prompt tokens expected cached there, in the gateway's
	// estimate's terms: the blocks the index matched where it saw the
	// upstream serve them; 0: none.
	Cached int
	// Distance is the prompt tokens this replica has sent the upstream to
	// compute since it last served those blocks (in the estimate's terms,
	// less what it expected cached): the new entries the engine's cache has
	// made room for since, which an LRU cache does by evicting what was
	// used least recently. Read only with Cached.
	Distance uint64
}

// Observation is what one finished request teaches its upstream's model:
// the record's measured split and what the request was routed with.
type Observation struct {
	// End is when the request ended on the request clock's source (the
	// proxy's stages.Clock reading: Timeline.Origin plus the done mark), as
	// a duration from that source's origin: what forgetting counts from.
	// Predict's now is read from the same source.
	End time.Duration
	// FirstToken says a first token reached the client (the breakdown's
	// OK): only such a request's split is measured, and Observe ignores
	// any other.
	FirstToken bool
	// Parts are the record's stages, Queue to Transport.
	Parts Parts
	// Unsplit says the engine reported nothing (the record's
	// upstream_unsplit): its time is all in Unattributed, but for the queue
	// the proxy inferred.
	Unsplit bool
	// PromptTokens is the prompt's size: the engine's usage count, else the
	// gateway's estimate. EstimatedTokens is the gateway's estimate when
	// PromptTokens is the engine's count (0 otherwise): the model learns
	// how the two differ on the upstream, and predicts from estimates.
	PromptTokens    int
	EstimatedTokens int
	// CachedTokens is the prompt tokens the engine served from its prefix
	// cache, when CachedReported (usage.prompt_tokens_details.cached_tokens,
	// llama.cpp's cache_n, ...).
	CachedTokens   int
	CachedReported bool
	// Expected is what the prefix index expected cached on the upstream
	// when the request was routed (the gateway's Choice.Expected; none
	// outside a least_ttft pool): the model learns how far the engine's
	// reports bear such expectations out, and at what distance its cache
	// has evicted what the index expects.
	Expected Expected
	// Load is the upstream's load when the request was routed.
	Load Load
}

// uncached is the prompt tokens the engine had to compute.
func uncached[N int | float64](prompt int, cached N) float64 {
	return max(float64(prompt)-float64(cached), 0)
}
