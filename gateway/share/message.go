package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ttftlens/ttftlens/gateway/predict"
	"github.com/ttftlens/ttftlens/gateway/prefix"
)

// Commit is one request a least_ttft pool routed, as replicas share it.
type Commit struct {
	// Upstream is the upstream's base URL, as configured: the same in
	// every replica.
	Upstream string
	// Computed is the prompt tokens it was sent to compute (those the
	// prefix index did not expect cached there).
	Computed uint64
	// Work is its predicted engine time (0: none predicted).
	Work time.Duration
	// Chain is the prompt's prefix chain (gateway/prefix), at most
	// prefix.MaxBlocks hashes; nil when it has none.
	Chain []uint64
	// InFlight is the publishing replica's requests on the upstream,
	// queued or in flight, once this one is counted (or, for a message
	// of a request's end alone, no longer counted: Computed, Work and
	// Chain are then zero).
	InFlight uint64
	// From is the replica that published it (set when a message is read).
	From uint64
}

// Observed is what one finished request taught its upstream's model, as
// replicas share it: every replica's model of the upstream learns from
// every replica's requests.
type Observed struct {
	// Upstream is the upstream's base URL.
	Upstream string
	// Observation is the request's, FirstToken set (only such requests
	// teach). Its End is the publisher's clock's: the receiver sets its
	// own.
	Observation predict.Observation
	// From is the replica that published it (set when a message is read).
	From uint64
}

// A message's first two bytes: its kind's tag and the format's version.
const (
	tagCommit   = 't'
	tagObserved = 'o'
	version     = 1
)

// maxURL bounds an upstream URL in a message.
const maxURL = 2048

// The bounds of a message's values: durations (an hour, in nanoseconds),
// token and request counts; appending clamps to them, reading refuses
// what is past them.
const (
	maxValue  = uint64(time.Hour)
	maxCount  = 1 << 30
	maxTokens = 1 << 40 // Computed: a count of tokens that grows with every request
)

// maxCommit is the most bytes a commit's message takes: its header, four
// uvarints and a chain of prefix.MaxBlocks.
const maxCommit = 2 + 8 + binary.MaxVarintLen64 + maxURL + 4*binary.MaxVarintLen64 + 8*prefix.MaxBlocks

// clamp is v within [0, limit].
func clamp[N int | int64 | time.Duration | uint64](v N, limit uint64) uint64 {
	if v < 0 {
		return 0
	}
	return min(uint64(v), limit)
}

// appendHeader appends the header every message starts with: tag,
// version, from (8 bytes, little endian), the upstream URL's length
// (uvarint) and bytes.
func appendHeader(b []byte, tag byte, from uint64, url string) []byte {
	b = append(b, tag, version)
	b = binary.LittleEndian.AppendUint64(b, from)
	b = binary.AppendUvarint(b, uint64(len(url)))
	return append(b, url...)
}

// appendCommit appends c's message, from the replica from, to b: the
// header, Computed, Work in nanoseconds and InFlight (uvarints), the
// chain's length (uvarint) and hashes (8 bytes each, little endian).
func appendCommit(b []byte, from uint64, c *Commit) []byte {
	b = appendHeader(b, tagCommit, from, c.Upstream)
	b = binary.AppendUvarint(b, clamp(c.Computed, maxTokens))
	b = binary.AppendUvarint(b, clamp(c.Work, maxValue))
	b = binary.AppendUvarint(b, clamp(c.InFlight, maxCount))
	b = binary.AppendUvarint(b, uint64(len(c.Chain)))
	for _, h := range c.Chain {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

// Observation flags, one byte.
const (
	obsUnsplit = 1 << iota
	obsCachedReported
	obsEngineKnown
)

// appendObserved appends o's message, from the replica from, to b: the
// header, a flags byte, then uvarints: the parts in nanoseconds, queue to
// transport; prompt, estimated and cached tokens; the expected cached
// tokens and their distance; the load's waiting, in flight and backlog
// (nanoseconds).
func appendObserved(b []byte, from uint64, o *Observed) []byte {
	ob := &o.Observation
	b = appendHeader(b, tagObserved, from, o.Upstream)
	var flags byte
	if ob.Unsplit {
		flags |= obsUnsplit
	}
	if ob.CachedReported {
		flags |= obsCachedReported
	}
	if ob.Load.EngineKnown {
		flags |= obsEngineKnown
	}
	b = append(b, flags)
	for _, d := range ob.Parts {
		b = binary.AppendUvarint(b, clamp(d, maxValue))
	}
	for _, v := range [...]int{ob.PromptTokens, ob.EstimatedTokens, ob.CachedTokens, ob.Expected.Cached} {
		b = binary.AppendUvarint(b, clamp(v, maxCount))
	}
	b = binary.AppendUvarint(b, clamp(ob.Expected.Distance, maxTokens))
	b = binary.AppendUvarint(b, clamp(ob.Load.Waiting, maxCount))
	b = binary.AppendUvarint(b, clamp(ob.Load.InFlight, maxCount))
	return binary.AppendUvarint(b, clamp(ob.Load.Backlog, maxValue))
}

var errShort = errors.New("message cut short")

// message is a message read: a commit or an observation, from a replica.
type message struct {
	from     uint64
	observed bool // observation holds it; else commit
	commit   Commit
	obs      Observed
}

// reader reads a message's fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint(limit uint64, what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.err = errShort
	case v > limit:
		r.err = fmt.Errorf("%s of %d: at most %d", what, v, limit)
	default:
		r.b = r.b[n:]
	}
	return v
}

// parseMessage reads a message appendCommit or appendObserved wrote
// (a Chain freshly allocated). Anything else is an error: another tag or
// version, a field cut short or out of bounds, bytes left over.
func parseMessage(b []byte) (m message, err error) {
	if len(b) < 10 {
		return m, errShort
	}
	tag := b[0]
	if tag != tagCommit && tag != tagObserved || b[1] != version {
		return m, fmt.Errorf("not a routing message of version %d (starts %#x %#x)", version, b[0], b[1])
	}
	m.from = binary.LittleEndian.Uint64(b[2:])
	r := &reader{b: b[10:]}
	n := r.uvarint(maxURL, "an upstream URL")
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("upstream URL of %d bytes: %w", n, errShort)
	}
	if r.err != nil {
		return m, r.err
	}
	url := string(r.b[:n])
	r.b = r.b[n:]
	if tag == tagObserved {
		return parseObserved(m, url, r)
	}
	c := &m.commit
	c.Upstream, c.From = url, m.from
	c.Computed = r.uvarint(maxTokens, "tokens computed")
	c.Work = time.Duration(r.uvarint(maxValue, "an engine time in ns"))
	c.InFlight = r.uvarint(maxCount, "requests in flight")
	blocks := r.uvarint(prefix.MaxBlocks, "a chain's blocks")
	if r.err != nil {
		return m, r.err
	}
	if uint64(len(r.b)) != 8*blocks {
		return m, fmt.Errorf("a chain of %d blocks in %d bytes", blocks, len(r.b))
	}
	if blocks > 0 {
		c.Chain = make([]uint64, blocks)
		for i := range c.Chain {
			c.Chain[i] = binary.LittleEndian.Uint64(r.b[8*i:])
		}
	}
	return m, nil
}

// parseObserved reads an observation's body from r.
func parseObserved(m message, url string, r *reader) (message, error) {
	m.observed = true
	o := &m.obs
	o.Upstream, o.From = url, m.from
	if len(r.b) == 0 {
		return m, errShort
	}
	flags := r.b[0]
	r.b = r.b[1:]
	if flags&^(obsUnsplit|obsCachedReported|obsEngineKnown) != 0 {
		return m, fmt.Errorf("unknown observation flags %#x", flags)
	}
	ob := &o.Observation
	ob.FirstToken, ob.Unsplit, ob.CachedReported, ob.Load.EngineKnown = true, flags&obsUnsplit != 0, flags&obsCachedReported != 0, flags&obsEngineKnown != 0
	for i := range ob.Parts {
		ob.Parts[i] = time.Duration(r.uvarint(maxValue, "a part in ns"))
	}
	ob.PromptTokens = int(r.uvarint(maxCount, "prompt tokens"))
	ob.EstimatedTokens = int(r.uvarint(maxCount, "estimated tokens"))
	ob.CachedTokens = int(r.uvarint(maxCount, "cached tokens"))
	ob.Expected.Cached = int(r.uvarint(maxCount, "expected cached tokens"))
	ob.Expected.Distance = r.uvarint(maxTokens, "a distance")
	ob.Load.Waiting = int64(r.uvarint(maxCount, "waiting requests"))
	ob.Load.InFlight = int64(r.uvarint(maxCount, "requests in flight"))
	ob.Load.Backlog = time.Duration(r.uvarint(maxValue, "a backlog in ns"))
	if r.err != nil {
		return m, r.err
	}
	if len(r.b) != 0 {
		return m, fmt.Errorf("%d bytes past an observation", len(r.b))
	}
	return m, nil
}
