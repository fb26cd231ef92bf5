package exporters

import (
	"time"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// kept is a record a sink keeps after Emit returns (the ring, the OTLP
// queue): a copy that shares nothing the proxy reuses
// (record.Record.CopyTo), with its stages derived once.
type kept struct {
	r  record.Record
	bd stages.Breakdown // r.Breakdown()
}

// keep copies r. It sorts r's inter-token gaps in place
// (stages.Stream.Gaps) and allocates nothing.
func keep(r *record.Record) kept {
	var k kept
	k.set(r, r.Breakdown())
	return k
}

// set makes k a copy of r, whose stages are bd, in place (a kept record
// is large, and the ring copies it under its lock).
func (k *kept) set(r *record.Record, bd stages.Breakdown) {
	r.CopyTo(&k.r)
	k.bd = bd
}

// waitedFirst is how long the client waited for its first token: TTFT when
// one reached it, otherwise the whole request (it waited at least that
// long, and got none). The ring ranks "slowest" by it.
func (k *kept) waitedFirst() time.Duration {
	if k.bd.OK {
		return k.bd.TTFT
	}
	return k.r.E2E()
}
