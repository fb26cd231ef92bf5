// Package predict predicts an upstream's time to first token for a new
// request from what its finished requests measured: the request clock's
// split (queue, preparation, prefill, first decode, unattributed,
// transport), learned online, one Model per upstream, forgetting by time
// so that an engine that slows down is seen within seconds.
// docs/routing.md, "The TTFT model", says what it learns and cannot know.
//
// It imports only the standard library. Predict and Observe allocate
// nothing; Predict takes no lock.
package predict

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultHalfLife is Config.HalfLife's default: an engine whose prefill
// doubles is predicted within 20 % of its new cost about two and a half
// half-lives later.
const DefaultHalfLife = 2 * time.Second

// minKeep is the least share of what was learned that one observation
// keeps: after a quiet spell the fit rests on its last few observations,
// not on the last one alone.
const minKeep = 0.5

// Config is a Model's settings.
type Config struct {
	// HalfLife is how fast observations lose weight: one HalfLife old, an
	// observation counts half as much as a new one. 0: DefaultHalfLife.
	HalfLife time.Duration
}

// The fits a Model keeps: each part's, the queue's four times over.
const (
	fitQueueEngine  = iota // queue against the engine's waiting requests (Load.Waiting)
	fitQueueFlight         // queue against this replica's in flight, when the engine's load is unknown
	fitQueueBacklog        // queue against the backlog (Load.Backlog, in milliseconds), where it fits best
	fitQueueIdle           // a mean: the queue of a request routed with nothing ahead (Load.Idle)
	fitPreparation         // a mean
	// The prefill against uncached prompt tokens, twice: over the hits
	// (the engine reported at least half the prompt cached), and over the
	// rest. A hit computes a few tokens, each attending to a long cached
	// context, at a cost a token the misses' line does not give, and one
	// line over both was pulled off each.
	fitPrefill
	fitPrefillHit
	// The hits' prefill against their attention work (pairs: the tokens
	// computed times the context each attends to), taken in place of the
	// hits' line where it fits them clearly better (flagPairs: its
	// residual under pairsMargin of the other's). On an engine whose
	// attention dominates a hit's cost (the reference engine's small
	// model) the cost grows with the cached context, which a line over the
	// tokens computed cannot see; on one whose per-token layers dominate
	// (a large model on an accelerator) it does not. In the routing
	// benchmark's records, lines fitted after the fact over each upstream's
	// hits (the engine's counts) were 13 % off their prefill at the median
	// over the tokens computed, 10 % over pairs.
	fitPrefillPairs
	// The same two lines over the hits routed with something ahead
	// (Load.Idle false), each hits' line followed by its pairs' line: a
	// busy engine's step carries other requests' work beside a hit's few
	// tokens, and a hit there took 1.05 to 2.25 times its cost on an idle
	// engine in the routing benchmark's records. Learned over every hit,
	// one line predicted the idle hits, most of them, at the busy ones'
	// cost; replayed over eleven runs' records, the two kinds apart took
	// the median of the runs' error p50 from 44.2 to 39.2 %. A request is
	// predicted on its kind's lines, else the other kind's.
	fitPrefillHitBusy
	fitPrefillPairsBusy
	fitFirstDecode  // a mean
	fitUnattributed // a mean: the network, for an engine that splits its time
	fitWhole        // Unattributed of an engine that reports no split, against uncached prompt tokens
	fitTransport    // a mean
	// The share of what the prefix index expected cached that the engine
	// reported cached (at most 1; the expectation taken in the engine's
	// count by the request's ratio of its two counts, so that an engine
	// counting fewer tokens than the estimate is not taken to have held
	// less of it), over the hits among requests it expected some on
	// (whether it will hit is residency's); and the share
	// of the prompt the engine reported cached where the index expected
	// none (an engine that kept a prefix the index has not seen it serve).
	// Means; Predict's cached tokens are scaled by them.
	fitHitExpected
	fitHitUnexpected
	// The engine's count of a prompt's tokens over the gateway's estimate
	// (a mean, over requests whose engine reported its count): a request's
	// estimate, and the cached tokens the index expects in the estimate's
	// terms, are scaled by it to the tokens the fits were learned in.
	fitTokens
	// The part of a hit's prompt past what the index expected cached: the
	// engine's count of it less the estimate's scaled by the prompt's
	// ratio of the two, a mean: the fixed part the engine computes there
	// beyond the question (the chat framing, the last partial block,
	// which it computes again). A remainder is predicted as that part
	// plus the estimate's remainder scaled by fitTokens' ratio. In the
	// routing benchmark's records, a ratio of the two counts fitted after
	// the fact (the model's way until 2026-12-06) was 21 % off the
	// engine's count at the median, a line 10 %, about 39 tokens and a
	// third of the estimate's; that third, taken for the slope, would
	// predict a conversation's long new turn at a third of its tokens, so
	// the prompts' ratio is the slope.
	fitRemainder
	numFits
)

// Each hits' line over tokens is followed by its line over pairs
// (Observe's and Predict's f+1).
var (
	_ = [1]struct{}{}[fitPrefillPairs-fitPrefillHit-1]
	_ = [1]struct{}{}[fitPrefillPairsBusy-fitPrefillHitBusy-1]
)

// pairsMargin is how much better than the hits' line over tokens the one
// over pairs must fit their recent observations to be taken: where the
// cached context barely varies the two fit alike, and the pairs' line,
// taken on noise, extrapolates a longer context's cost from a slope over
// the tokens computed.
const pairsMargin = 0.8

// The flags a Model publishes with its lines.
const (
	flagEngineQueue  = 1 << iota // the engine's load was known for most recent observations, and its line fits them no worse than the in-flight one: fitQueueEngine applies
	flagBacklogQueue             // the backlog's line fits the recent observations better than the other queue line: fitQueueBacklog applies
	flagUnsplit                  // most recent observations were unsplit: fitWhole applies
	flagCached                   // the engine reported its cached tokens for most recent observations
	flagPairs                    // the hits' line over pairs fits them better than the one over tokens: fitPrefillPairs (fitPrefillPairsBusy) applies
	flagObserved                 // the first of numFits flags, one a fit: observed (observed(f))
)

// Every fit's observed flag fits in the flags word.
const _ = uint32(flagObserved << (numFits - 1))

// observed is the flag saying fit f has taken an observation.
func observed(f int) uint32 { return flagObserved << f }

// Model is one upstream's TTFT model. Observe teaches it; Predict asks it.
// Both may be called from any goroutine: observations are taken one at a
// time under a mutex, and each publishes the model's lines under a
// sequence count, which Predict reads without locking (retrying while an
// observation publishes).
type Model struct {
	halfLife float64 // nanoseconds

	mu       sync.Mutex
	fits     [numFits]fit
	resident residency
	last     time.Duration // the newest observation's End
	n        int           // observations taken
	wEngine  float64       // decayed weight of observations with the engine's load known
	wCached  float64       // decayed weight of observations with cached tokens reported
	wUnsplit float64       // decayed weight of unsplit observations
	wAll     float64       // decayed weight of all observations

	_ [64]byte // the published lines on cache lines of their own
	// seq is odd while an observation publishes, 0 until the first.
	seq   atomic.Uint64
	lines [numFits][2]atomic.Uint64 // a and b, float64 bits
	flags atomic.Uint32
	evict atomic.Int32 // resident.evictedFrom()
	at    atomic.Int64 // last
}

// New returns an empty Model: it predicts nothing until observed.
func New(c Config) *Model {
	if c.HalfLife <= 0 {
		c.HalfLife = DefaultHalfLife
	}
	m := &Model{halfLife: float64(c.HalfLife)}
	// A prompt's cost has no fixed part below zero. (A line kept below the
	// axis, fitted across a slowdown, the old fast requests at small
	// prompts and the new slow ones at larger, predicted no prefill at all
	// for small prompts, and the slowed engine kept getting them.)
	for _, f := range [...]int{fitPrefill, fitPrefillHit, fitPrefillPairs, fitPrefillHitBusy, fitPrefillPairsBusy, fitWhole} {
		m.fits[f].costed = true
	}
	// A whole prompt's cost that falls as the prompt grows is noise, and
	// is read in proportion to the tokens: these lines predict a hit's few
	// tokens until a hit has been seen, and their mean predicted it at a
	// whole prompt's prefill (an engine's model that had seen two misses,
	// the longer prompt the faster, predicted every hit past an SLO, and
	// the route refused every request after them). A hit's cost is mostly
	// its fixed part, and its lines keep the mean.
	m.fits[fitPrefill].proportional = true
	m.fits[fitWhole].proportional = true
	return m
}

// keep is the share of its weight an observation age old keeps.
func (m *Model) keep(age time.Duration) float64 {
	return max(math.Exp2(-float64(age)/m.halfLife), minKeep)
}

// Observe teaches m one finished request; one without a first token
// (o.FirstToken false) teaches nothing. Observations may come out of order:
// one older than the newest taken counts for its age.
func (m *Model) Observe(o Observation) {
	if !o.FirstToken {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w := 1.0
	switch {
	case m.n == 0:
		m.last = o.End
	case o.End >= m.last:
		d := m.keep(o.End - m.last)
		for i := range m.fits {
			m.fits[i].decay(d)
		}
		m.resident.decay(d)
		m.wEngine, m.wCached, m.wUnsplit, m.wAll = m.wEngine*d, m.wCached*d, m.wUnsplit*d, m.wAll*d
		m.last = o.End
	default:
		w = m.keep(m.last - o.End)
	}
	m.n++
	m.wAll += w

	part := func(p Part) float64 { return float64(o.Parts[p]) }
	queue := part(Queue)
	m.fits[fitQueueFlight].add(w, float64(max(o.Load.InFlight, 0)), queue)
	m.fits[fitQueueBacklog].add(w, msOf(o.Load.Backlog), queue)
	if o.Load.EngineKnown {
		m.wEngine += w
		m.fits[fitQueueEngine].add(w, float64(max(o.Load.Waiting, 0)), queue)
	}
	if o.Load.Idle() {
		m.fits[fitQueueIdle].add(w, 0, queue)
	}
	cached := 0
	// hit: the engine served at least half the prompt from its cache.
	hit := o.CachedReported && o.PromptTokens > 0 && o.CachedTokens*2 >= o.PromptTokens
	// ratio is this request's engine tokens per estimated token (1 without
	// both counts); expected, what the index expected cached, in the
	// engine's count as far as that ratio tells.
	ratio := 1.0
	if o.EstimatedTokens > 0 && o.PromptTokens > 0 {
		ratio = float64(o.PromptTokens) / float64(o.EstimatedTokens)
	}
	expected := float64(o.Expected.Cached) * ratio
	if o.CachedReported {
		m.wCached += w
		cached = o.CachedTokens
		switch {
		case o.Expected.Cached > 0:
			// Borne out: the engine served at least half of what was
			// expected (the rest may be the partial block the engine
			// recomputes, or the estimate's count against the engine's).
			bornOut := float64(cached)*2 >= expected
			m.resident.add(w, o.Expected.Distance, bornOut)
			if bornOut {
				m.fits[fitHitExpected].add(w, 0, min(float64(cached)/expected, 1))
			}
		case o.PromptTokens > 0:
			m.fits[fitHitUnexpected].add(w, 0, min(float64(cached)/float64(o.PromptTokens), 1))
		}
	}
	if o.EstimatedTokens > 0 && o.PromptTokens > 0 {
		m.fits[fitTokens].add(w, 0, ratio)
		if rest := o.EstimatedTokens - o.Expected.Cached; o.Expected.Cached > 0 && rest > 0 && hit {
			m.fits[fitRemainder].add(w, 0, uncached(o.PromptTokens, cached)-float64(rest)*ratio)
		}
	}
	tokens := uncached(o.PromptTokens, cached)
	if o.Unsplit {
		m.wUnsplit += w
		m.fits[fitWhole].add(w, tokens, part(Unattributed))
	} else {
		m.fits[fitPreparation].add(w, 0, part(Preparation))
		if hit {
			f := hitLine(o.Load.Idle())
			m.fits[f].add(w, tokens, part(Prefill))
			m.fits[f+1].add(w, pairs(tokens, float64(cached)), part(Prefill))
		} else {
			m.fits[fitPrefill].add(w, tokens, part(Prefill))
		}
		m.fits[fitFirstDecode].add(w, 0, part(FirstDecode))
		m.fits[fitUnattributed].add(w, 0, part(Unattributed))
	}
	m.fits[fitTransport].add(w, 0, part(Transport))
	m.publish()
}

// publish makes m's lines and flags Predict's. Called with m.mu held.
func (m *Model) publish() {
	var flags uint32
	queue := fitQueueFlight
	if m.wEngine*2 > m.wAll && m.fits[fitQueueEngine].residual() <= m.fits[fitQueueFlight].residual() {
		flags |= flagEngineQueue
		queue = fitQueueEngine
	}
	if m.fits[fitQueueBacklog].n >= warm && m.fits[fitQueueBacklog].residual() < m.fits[queue].residual() {
		flags |= flagBacklogQueue
	}
	if m.wUnsplit*2 > m.wAll {
		flags |= flagUnsplit
	}
	if m.wCached*2 > m.wAll {
		flags |= flagCached
	}
	// Which of the two hits' lines applies is read from the idle hits
	// (their cost is the hit's alone), from the busy ones until they warm.
	hl := fitPrefillHit
	if m.fits[fitPrefillPairs].n < warm {
		hl = fitPrefillHitBusy
	}
	if hp := &m.fits[hl+1]; hp.n >= warm && hp.residual() < pairsMargin*m.fits[hl].residual() {
		flags |= flagPairs
	}
	for f := range m.fits {
		if m.fits[f].n > 0 {
			flags |= observed(f)
		}
	}
	m.seq.Add(1)
	for i := range m.fits {
		m.lines[i][0].Store(math.Float64bits(m.fits[i].a))
		m.lines[i][1].Store(math.Float64bits(m.fits[i].b))
	}
	m.flags.Store(flags)
	m.evict.Store(int32(m.resident.evictedFrom()))
	m.at.Store(int64(m.last))
	m.seq.Add(1)
}

// Prediction is a predicted time to first token past routing.
type Prediction struct {
	// Parts are the predicted parts. For an engine that reports no split
	// (Unsplit) its whole time is Unattributed, and Preparation, Prefill
	// and FirstDecode are zero.
	Parts Parts
	// Total is the parts' sum.
	Total time.Duration
	// Unsplit says the prediction is from unsplit observations.
	Unsplit bool
	// Age is how old the newest observation was: a model that has not
	// been observed for long (an upstream nobody sends to) predicts from
	// what it was then.
	Age time.Duration
	// Evicted says the prefix the index expected cached was predicted
	// evicted by now (its Distance past what the engine's reports showed
	// its cache keeps), and computed: none of it was predicted cached.
	Evicted bool
}

// Work is the engine time of a request predicted as p: the time it holds
// the engine before the requests behind it start (Load.Backlog's unit).
func (p *Prediction) Work() time.Duration {
	return p.Parts[Preparation] + p.Parts[Prefill] + p.Parts[Unattributed]
}

// Observed says m has taken an observation: a Predict that is not ok then
// asked for a prompt to compute of a model that has seen only hits.
func (m *Model) Observed() bool { return m.seq.Load() != 0 }

// Predict predicts, at now (the request clock's source, as Observation.End),
// a request of promptTokens (the gateway's estimate) of which the prefix
// index expects x in the engine's prefix cache, on an upstream with load.
// The estimate's tokens are taken in the engine's, as far as its reports
// have shown how the two differ. ok is false while m has taken no
// observation, and for a request predicted to compute most of its prompt
// while m has taken only hits: there is no prediction, and the caller
// decides without one (another policy). The hits' line, fitted over the
// few tokens past a cached prefix, says nothing of a whole prompt's
// prefill: an engine whose first requests were hits had its misses
// predicted at a tenth of what they took.
// The expected cached tokens count only when the engine has been reporting
// what it cached: otherwise its prefill was learned against whole prompts.
func (m *Model) Predict(now time.Duration, promptTokens int, x Expected, load Load) (p Prediction, ok bool) {
	var lines [numFits][2]float64
	var flags uint32
	var at int64
	var evict int32
	for try := 0; ; try++ {
		if try > 2 {
			runtime.Gosched() // an observation publishing was preempted
		}
		s := m.seq.Load()
		if s == 0 {
			return p, false
		}
		if s&1 != 0 {
			continue
		}
		for i := range lines {
			lines[i][0] = math.Float64frombits(m.lines[i][0].Load())
			lines[i][1] = math.Float64frombits(m.lines[i][1].Load())
		}
		flags, at, evict = m.flags.Load(), m.at.Load(), m.evict.Load()
		if m.seq.Load() == s {
			break
		}
	}
	line := func(f int, x float64) time.Duration {
		return time.Duration(max(lines[f][0]+lines[f][1]*x, 0))
	}
	switch {
	case load.Idle() && flags&observed(fitQueueIdle) != 0:
		p.Parts[Queue] = line(fitQueueIdle, 0)
	case flags&flagBacklogQueue != 0:
		p.Parts[Queue] = line(fitQueueBacklog, msOf(load.Backlog))
	case load.EngineKnown && flags&flagEngineQueue != 0:
		p.Parts[Queue] = line(fitQueueEngine, float64(max(load.Waiting, 0)))
	default:
		p.Parts[Queue] = line(fitQueueFlight, float64(max(load.InFlight, 0)))
	}
	p.Parts[Queue] = max(p.Parts[Queue], load.Ahead)
	// The tokens to compute, in the engine's: the prompt past what is
	// predicted cached, scaled by the prompts' ratio; where the index
	// expects a prefix cached and the engine's hits have shown how their
	// remainder is counted, that remainder, scaled, and its fixed part
	// (which holds what the engine did not have of the expected prefix
	// as well, where its hits lacked some).
	ratio := 1.0
	if flags&observed(fitTokens) != 0 {
		ratio = max(lines[fitTokens][0], 0)
	}
	cachedTokens := x.Cached
	if cachedTokens > 0 && flags&flagCached != 0 && distClass(x.Distance) >= int(evict) {
		p.Evicted, cachedTokens = true, 0
	}
	cached := cachedExpected(flags, &lines, promptTokens, cachedTokens)
	var tokens float64
	if cachedTokens > 0 && flags&observed(fitRemainder) != 0 {
		tokens = max(lines[fitRemainder][0]+ratio*uncached(promptTokens, cachedTokens), 0)
	} else {
		tokens = uncached(promptTokens, cached) * ratio
	}
	if flags&flagUnsplit != 0 {
		p.Unsplit = true
		p.Parts[Unattributed] = line(fitWhole, tokens)
	} else {
		p.Parts[Preparation] = line(fitPreparation, 0)
		// A hit predicted (the index's prefix, at least half the prompt,
		// as Observe counts a hit): the hits' line; else the misses',
		// either until the other has been observed, but for a prompt
		// predicted mostly computed, which the hits' line cannot tell.
		// The hits' lines are the request's kind's (idle or busy), else
		// the other kind's.
		hits := hitLine(load.Idle())
		if flags&observed(hits) == 0 {
			hits = hitLine(!load.Idle())
		}
		prefill, other := fitPrefill, hits
		if cachedTokens > 0 && cached > 0 && cached*2 >= float64(promptTokens) {
			prefill, other = other, prefill
		}
		if flags&observed(prefill) == 0 {
			if other == hits && cached*2 < float64(promptTokens) {
				return Prediction{}, false
			}
			prefill = other
		}
		work := tokens
		if prefill == hits && flags&flagPairs != 0 {
			prefill, work = hits+1, pairs(tokens, cached*ratio)
		}
		p.Parts[Prefill] = line(prefill, work)
		p.Parts[FirstDecode] = line(fitFirstDecode, 0)
		p.Parts[Unattributed] = line(fitUnattributed, 0)
	}
	p.Parts[Transport] = line(fitTransport, 0)
	p.Total = p.Parts.Sum()
	p.Age = now - time.Duration(at)
	return p, true
}

// hitLine is the hits' prefill line over tokens for a request routed to an
// idle upstream or a busy one; its line over pairs follows it.
func hitLine(idle bool) int {
	if idle {
		return fitPrefillHit
	}
	return fitPrefillHitBusy
}

// pairs is the attention work of computing n prompt tokens past c cached:
// each attends to the cached context and to the computed tokens before it,
// n·(c + n/2) pairs, in thousands (the hits' prefill line's unit, in which
// its spread test reads whole units).
func pairs(n, c float64) float64 { return n * (c + n/2) / 1000 }

// msOf is d in milliseconds: the backlog line's unit, in which its spread
// test reads whole units.
func msOf(d time.Duration) float64 { return float64(max(d, 0)) / float64(time.Millisecond) }

// cachedExpected is the prompt tokens to predict as cached for a prompt of
// promptTokens of which the prefix index expects expected cached: none for
// an engine that does not report its cache; else the expectation scaled by
// the share of such expectations the engine's reports bore out (all, until
// it reported a hit), or, where the index expects none (or predicted it
// evicted), the share of the prompt the engine reported cached all the same
// (none, until it did).
func cachedExpected(flags uint32, lines *[numFits][2]float64, promptTokens, expected int) float64 {
	switch {
	case flags&flagCached == 0:
		return 0
	case expected > 0 && flags&observed(fitHitExpected) != 0:
		return float64(expected) * min(max(lines[fitHitExpected][0], 0), 1)
	case expected > 0:
		return float64(expected)
	case flags&observed(fitHitUnexpected) != 0:
		return float64(promptTokens) * min(max(lines[fitHitUnexpected][0], 0), 1)
	}
	return 0
}

// TokenRatio is the engine's count of a prompt's tokens per token of the
// gateway's estimate, as m has learned it (1 before it has).
func (m *Model) TokenRatio() float64 {
	for {
		s := m.seq.Load()
		if s == 0 {
			return 1
		}
		if s&1 != 0 {
			runtime.Gosched()
			continue
		}
		r, f := math.Float64frombits(m.lines[fitTokens][0].Load()), m.flags.Load()
		if m.seq.Load() == s {
			if f&observed(fitTokens) == 0 || r <= 0 {
				return 1
			}
			return r
		}
	}
}
