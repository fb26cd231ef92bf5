package exporters

import (
	"sync/atomic"

	"github.com/ttftlens/ttftlens/record"
)

// Named is a sink with the name its drops are exported under
// (ttftlens_records_dropped_total{sink="<Name>"}).
type Named struct {
	Name string
	Sink record.Sink
}

// Fanout hands each record to several sinks in order, like record.Sinks,
// and isolates them: a sink that panics loses that record (counted as a
// drop of that sink) but neither the request nor the sinks after it see
// the panic. Safe for concurrent use if the sinks are.
type Fanout struct {
	sinks []fanoutSink
}

type fanoutSink struct {
	Named
	panics *atomic.Uint64
}

// NewFanout returns a fanout over sinks, in order.
func NewFanout(sinks ...Named) *Fanout {
	f := &Fanout{sinks: make([]fanoutSink, len(sinks))}
	for i, s := range sinks {
		f.sinks[i] = fanoutSink{Named: s, panics: new(atomic.Uint64)}
	}
	return f
}

// Emit hands r to every sink.
func (f *Fanout) Emit(r *record.Record) {
	for i := range f.sinks {
		f.sinks[i].emit(r)
	}
}

func (s *fanoutSink) emit(r *record.Record) {
	defer func() {
		if recover() != nil {
			s.panics.Add(1)
		}
	}()
	s.Sink.Emit(r)
}

// Track exports every sink's drops on m: the records it lost to panics
// here, plus its own Dropped count when it is a Dropper.
func (f *Fanout) Track(m *Metrics) {
	for i := range f.sinks {
		m.TrackDrops(f.sinks[i].Name, sinkDrops{&f.sinks[i]})
	}
}

type sinkDrops struct{ s *fanoutSink }

func (d sinkDrops) Dropped() uint64 {
	n := d.s.panics.Load()
	if dr, ok := d.s.Sink.(Dropper); ok {
		n += dr.Dropped()
	}
	return n
}
