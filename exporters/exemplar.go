package exporters

import (
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// exemplarEvery is how often at most a bucket of the TTFT or end-to-end
// histogram of one (model, upstream) takes a record's trace id as its
// exemplar. A bucket shows its latest exemplar only, and a scrape keeps
// that one, so at a scrape interval of a second or more every bucket
// observed since the last scrape still shows a trace of its own; what
// goes is building exemplars nobody sees (client_golang allocates seven
// per exemplar and takes a lock for the native histogram's).
const exemplarEvery = time.Second

// exemplarHistogram is a client_golang histogram child.
type exemplarHistogram interface {
	prometheus.Observer
	prometheus.ExemplarObserver
}

// exemplarGate holds, per classic bucket of LatencyBuckets (and +Inf),
// when it last took an exemplar (Unix nanoseconds; 0: never).
type exemplarGate []atomic.Int64

func newExemplarGate() exemplarGate { return make(exemplarGate, len(LatencyBuckets)+1) }

// due reports whether the bucket of v may take an exemplar at the time
// at, and if so claims it: one caller of many at once gets it.
func (g exemplarGate) due(v float64, at int64) bool {
	i := 0
	for i < len(LatencyBuckets) && v > LatencyBuckets[i] {
		i++
	}
	last := g[i].Load()
	return (last == 0 || at-last >= int64(exemplarEvery)) && g[i].CompareAndSwap(last, at)
}

// exemplar is one record's trace id as an exemplar: its label map is
// taken from exemplarLabels only when a bucket is due one.
type exemplar struct {
	trace  record.TraceID
	at     int64 // the record's end, Unix nanoseconds
	labels prometheus.Labels
}

// observe observes v on h, with the trace id as exemplar when the record
// has one and v's bucket is due one.
func (e *exemplar) observe(h exemplarHistogram, g exemplarGate, v float64) {
	if e.trace == (record.TraceID{}) || !g.due(v, e.at) {
		h.Observe(v)
		return
	}
	if e.labels == nil {
		e.labels = exemplarLabels.Get().(prometheus.Labels)
		e.labels["trace_id"] = traceIDLabel(e.trace)
	}
	h.ObserveWithExemplar(v, e.labels)
}

// release returns the label map, if one was taken.
func (e *exemplar) release() {
	if e.labels != nil {
		exemplarLabels.Put(e.labels)
	}
}

// recordEnd is when r ended on the wall clock (when it was received, if
// it has no end), the time its exemplars are taken at: the record's own
// clock, not a clock read per record.
func recordEnd(r *record.Record) int64 {
	at := r.Timeline.Wall().UnixNano()
	if d, ok := r.Timeline.At(stages.Done); ok {
		at += int64(d)
	}
	return at
}

// exemplarLabels holds the label maps of exemplars for reuse: client_golang
// copies an exemplar's labels into the exemplar it keeps (newExemplar) and
// keeps no reference to the map, so a map may serve one record after
// another (never two at once).
var exemplarLabels = sync.Pool{New: func() any { return prometheus.Labels{} }}

// traceIDLabel is t in lowercase hex, in one allocation: the exemplar
// keeps the string.
func traceIDLabel(t record.TraceID) string {
	var b [2 * len(record.TraceID{})]byte
	hex.Encode(b[:], t[:])
	return string(b[:])
}
