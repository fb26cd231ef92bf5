package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

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

// The message's first two bytes: a tag and the format's version.
const (
	tag     = 't'
	version = 1
)

// maxURL bounds an upstream URL in a message.
const maxURL = 2048

// appendMessage appends c's message, from the replica from, to b:
// tag, version, from (8 bytes), the URL's length (uvarint) and bytes,
// Computed, Work in nanoseconds and InFlight (uvarints), the chain's length (uvarint)
// and hashes (8 bytes each), little endian.
func appendMessage(b []byte, from uint64, c *Commit) []byte {
	b = append(b, tag, version)
	b = binary.LittleEndian.AppendUint64(b, from)
	b = binary.AppendUvarint(b, uint64(len(c.Upstream)))
	b = append(b, c.Upstream...)
	b = binary.AppendUvarint(b, c.Computed)
	b = binary.AppendUvarint(b, uint64(max(c.Work, 0)))
	b = binary.AppendUvarint(b, c.InFlight)
	b = binary.AppendUvarint(b, uint64(len(c.Chain)))
	for _, h := range c.Chain {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

var errShort = errors.New("message cut short")

// parseMessage reads a message appendMessage wrote: the replica it is
// from and its commit (Chain freshly allocated). Anything else is an
// error: another tag or version, a field cut short or out of bounds,
// bytes left over.
func parseMessage(b []byte) (from uint64, c Commit, err error) {
	if len(b) < 10 {
		return 0, c, errShort
	}
	if b[0] != tag || b[1] != version {
		return 0, c, fmt.Errorf("not a routing message of version %d (starts %#x %#x)", version, b[0], b[1])
	}
	from, b = binary.LittleEndian.Uint64(b[2:]), b[10:]
	c.From = from
	uvarint := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errShort
		}
		b = b[n:]
		return v, nil
	}
	n, err := uvarint()
	if err != nil {
		return 0, c, err
	}
	if n > maxURL || n > uint64(len(b)) {
		return 0, c, fmt.Errorf("upstream URL of %d bytes: %w", n, errShort)
	}
	c.Upstream, b = string(b[:n]), b[n:]
	if c.Computed, err = uvarint(); err != nil {
		return 0, c, err
	}
	work, err := uvarint()
	if err != nil {
		return 0, c, err
	}
	if work > uint64(time.Hour) {
		return 0, c, fmt.Errorf("engine time of %d ns: more than an hour", work)
	}
	c.Work = time.Duration(work)
	if c.InFlight, err = uvarint(); err != nil {
		return 0, c, err
	}
	if n, err = uvarint(); err != nil {
		return 0, c, err
	}
	if n > prefix.MaxBlocks {
		return 0, c, fmt.Errorf("a chain of %d blocks: at most %d", n, prefix.MaxBlocks)
	}
	if uint64(len(b)) != 8*n {
		return 0, c, fmt.Errorf("a chain of %d blocks in %d bytes", n, len(b))
	}
	if n > 0 {
		c.Chain = make([]uint64, n)
		for i := range c.Chain {
			c.Chain[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
	}
	return from, c, nil
}
