// Package spanjoin joins the engines' own request spans, received over
// OTLP (the receiver package), to the records of the requests they
// describe. A Joiner stands in front of the record sinks: a record whose
// engine reports its timing only in a span waits in it, after the client
// has its response, until the span comes (its stages are then split from
// the span) or a bound passes (it is written unsplit, flagged
// engine_span_missing); every other record goes straight through. Every
// record is written exactly once, whichever comes first.
package spanjoin

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// The defaults of Options.
const (
	// DefaultWait covers the OpenTelemetry SDKs' default batch delay (5 s,
	// OTEL_BSP_SCHEDULE_DELAY) and the export that follows it.
	DefaultWait = 10 * time.Second
	// DefaultMaxWaiting bounds the records waiting at once: 10 s of 1,000
	// requests a second.
	DefaultMaxWaiting = 10_000
	// DefaultMaxWaitingBytes bounds their memory.
	DefaultMaxWaitingBytes = 64 << 20
	// silentAfter is how many records of an upstream in a row may go
	// without a span before its records stop waiting (until a span of it
	// comes again): an engine not pointed at the receiver costs this many
	// records the wait, not every one.
	silentAfter = 8
	// recentKeys is how many written records' traces are remembered, to
	// tell a span that came too late from one that matches nothing.
	recentKeys = 16 << 10
)

// Options configure a Joiner. The zero value uses the defaults.
type Options struct {
	// Wait is how long a record waits for its span after the request
	// ended (default DefaultWait), and how long a span that came before
	// its record is kept for it.
	Wait time.Duration
	// MaxWaiting and MaxWaitingBytes bound the records waiting, in number
	// and in memory. A record over either is written at once, unsplit
	// (engine_span_missing "full"). So are the spans kept for records not
	// yet ended, in number.
	MaxWaiting      int
	MaxWaitingBytes int64
	// Clock times the waits (default clock.Real).
	Clock clock.Clock
	// Log gets one line when an upstream's records stop waiting because
	// its engine sends no spans, and when they start again (nil: none).
	Log *zerolog.Logger
}

// Missing reasons, the record's engine_span_missing.
const (
	MissingWait     = "wait"
	MissingFull     = "full"
	MissingShutdown = "shutdown"
)

// Joiner is a record.Sink holding records for their engine's span, and a
// receiver.Consumer of the spans. Safe for concurrent use.
type Joiner struct {
	next record.Sink
	opts Options

	mu        sync.Mutex
	closed    bool
	waiting   map[[16]byte][]*held // by trace id: a client's trace may hold several requests
	ids       map[string]struct{}  // the waiting records' request ids
	n         int                  // records waiting
	bytes     int64                // their estimated memory
	drained   chan struct{}        // closed when the last waiting record leaves during Close
	early     map[[16]byte][]*earlySpan
	nEarly    int
	stages    map[[16]byte]*stageSpans // stage spans, by trace, for the request span still to come
	recent    recentSet
	upstreams map[string]*upstreamState

	c counters
}

// held is a record waiting for its span.
type held struct {
	rec   record.Record
	bytes int64
	timer clock.Timer
}

// earlySpan is a span that came before its record ended.
type earlySpan struct {
	parent [8]byte
	rep    engines.SpanReport
	timer  clock.Timer
}

// stageSpans are the stage spans of a trace, kept for its request span.
type stageSpans struct {
	st    engines.StageSpans
	timer clock.Timer
}

// upstreamState is what the joiner learned about an upstream's spans.
type upstreamState struct {
	joined bool // a span of it has come (joined or late)
	misses int  // records in a row written without one
}

// New returns a Joiner writing records to next.
func New(next record.Sink, opts Options) *Joiner {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.MaxWaiting <= 0 {
		opts.MaxWaiting = DefaultMaxWaiting
	}
	if opts.MaxWaitingBytes <= 0 {
		opts.MaxWaitingBytes = DefaultMaxWaitingBytes
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	return &Joiner{
		next:      next,
		opts:      opts,
		waiting:   map[[16]byte][]*held{},
		ids:       map[string]struct{}{},
		early:     map[[16]byte][]*earlySpan{},
		stages:    map[[16]byte]*stageSpans{},
		recent:    newRecentSet(recentKeys),
		upstreams: map[string]*upstreamState{},
	}
}

// recordSize is a waiting record's memory without its strings.
var recordSize = int64(reflect.TypeFor[held]().Size())

// Emit writes r now, or keeps a copy of it until its span comes. r needs
// its span when its first token reached the client, the engine reported
// nothing in band (upstream_unsplit) and its upstream's engine sends
// spans (its kind does, or a span of it came before), unless the last
// silentAfter of the upstream's records went without one.
func (j *Joiner) Emit(r *record.Record) {
	if !candidate(r) {
		j.next.Emit(r)
		return
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.next.Emit(r)
		return
	}
	if sp := j.takeEarly(r); sp != nil {
		j.remember(r)
		j.learned(r.Upstream)
		st := j.takeStages(r.TraceID)
		j.mu.Unlock()
		j.join(r, &sp.rep, st)
		j.next.Emit(r)
		return
	}
	if !j.expects(r) {
		j.remember(r)
		j.mu.Unlock()
		j.next.Emit(r)
		return
	}
	size := recordSize + memOf(r)
	if j.n >= j.opts.MaxWaiting || j.bytes+size > j.opts.MaxWaitingBytes {
		j.remember(r)
		j.mu.Unlock()
		j.c.missing[missFull].Add(1)
		r.EngineSpanMissing = MissingFull
		j.next.Emit(r)
		return
	}
	h := new(held) // never reused: a stale timer of an old one must not find it waiting
	r.CopyTo(&h.rec)
	h.bytes = size
	j.waiting[r.TraceID] = append(j.waiting[r.TraceID], h)
	j.ids[r.RequestID] = struct{}{}
	j.n++
	j.bytes += size
	h.timer = j.opts.Clock.AfterFunc(j.opts.Wait, func() { j.expire(h) })
	j.mu.Unlock()
	j.c.held.Add(1)
}

// candidate reports whether r could be split by a span: its first token
// reached the client after the request was sent upstream, no engine report
// split it in band, and the engine finished it (engines send no span, or
// not reliably, for a request aborted or failed).
func candidate(r *record.Record) bool {
	tl := &r.Timeline
	return (r.Reason == endreason.Stop || r.Reason == endreason.Length) &&
		r.EngineSource == "" && !tl.EngineReported() &&
		tl.Has(stages.UpstreamSent) && tl.Has(stages.FirstTokenFlushed)
}

// expects reports whether r's upstream sends spans. Called with mu held.
func (j *Joiner) expects(r *record.Record) bool {
	st := j.upstreams[r.Upstream]
	if st == nil {
		return engines.ReportsSpans(r.Engine)
	}
	return (st.joined || engines.ReportsSpans(r.Engine)) && st.misses < silentAfter
}

// ConsumeSpans joins each request span in rs to its waiting record, or
// keeps it for a record not yet ended, or counts it late or unmatched.
// Spans that are not an engine's request span are ignored.
func (j *Joiner) ConsumeSpans(rs []*tracepb.ResourceSpans) {
	for _, res := range rs {
		for _, ss := range res.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				j.consume(sp)
			}
		}
	}
}

func (j *Joiner) consume(sp *tracepb.Span) {
	var trace [16]byte
	var parent [8]byte
	if len(sp.GetTraceId()) != len(trace) {
		return
	}
	copy(trace[:], sp.GetTraceId())
	hasParent := len(sp.GetParentSpanId()) == len(parent)
	copy(parent[:], sp.GetParentSpanId())
	rep, ok := engines.ReadSpan(sp)
	switch {
	case !ok && hasParent:
		j.keepStage(trace, sp)
		return
	case !ok:
		return // not a request's span
	case !hasParent: // the engine started a trace of its own: no record is its parent
		j.c.spans[spanUnmatched].Add(1)
		return
	}

	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.c.spans[spanUnmatched].Add(1)
		return
	}
	if h := j.takeWaiting(trace, parent); h != nil {
		j.remember(&h.rec)
		j.learned(h.rec.Upstream)
		st := j.takeStages(trace)
		j.mu.Unlock()
		h.timer.Stop()
		j.join(&h.rec, &rep, st)
		j.next.Emit(&h.rec)
		return
	}
	if up, ok := j.recent.get(trace); ok {
		j.learned(up)
		j.mu.Unlock()
		j.c.spans[spanLate].Add(1)
		return
	}
	if j.nEarly >= j.opts.MaxWaiting {
		j.mu.Unlock()
		j.c.spans[spanUnmatched].Add(1)
		return
	}
	e := &earlySpan{parent: parent, rep: rep}
	j.early[trace] = append(j.early[trace], e)
	j.nEarly++
	e.timer = j.opts.Clock.AfterFunc(j.opts.Wait, func() { j.expireEarly(trace, e) })
	j.mu.Unlock()
}

// takeWaiting removes and returns the record the span (trace, parent)
// belongs to: the one whose span is its parent, or, when the span hangs
// further down the engine's tree, the trace's only waiting record. Called
// with mu held.
func (j *Joiner) takeWaiting(trace [16]byte, parent [8]byte) *held {
	hs := j.waiting[trace]
	i := -1
	for k, h := range hs {
		if h.rec.SpanID == parent {
			i = k
			break
		}
	}
	if i < 0 {
		if len(hs) != 1 || j.recent.hasTrace(trace) {
			return nil
		}
		i = 0
	}
	h := hs[i]
	j.dropWaiting(trace, i)
	return h
}

// dropWaiting removes the trace's i-th waiting record. Called with mu
// held.
func (j *Joiner) dropWaiting(trace [16]byte, i int) {
	hs := j.waiting[trace]
	h := hs[i]
	hs = append(hs[:i], hs[i+1:]...)
	if len(hs) == 0 {
		delete(j.waiting, trace)
	} else {
		j.waiting[trace] = hs
	}
	delete(j.ids, h.rec.RequestID)
	j.n--
	j.bytes -= h.bytes
	if j.n == 0 && j.drained != nil {
		close(j.drained)
		j.drained = nil
	}
}

// takeEarly removes and returns the span kept for r, if one came first:
// the one parented to r's span, else the trace's only one. Called with mu
// held.
func (j *Joiner) takeEarly(r *record.Record) *earlySpan {
	es := j.early[r.TraceID]
	i := -1
	for k, e := range es {
		if e.parent == r.SpanID {
			i = k
			break
		}
	}
	if i < 0 {
		if len(es) != 1 {
			return nil
		}
		i = 0
	}
	e := es[i]
	j.dropEarly(r.TraceID, i)
	e.timer.Stop()
	return e
}

func (j *Joiner) dropEarly(trace [16]byte, i int) {
	es := append(j.early[trace][:i], j.early[trace][i+1:]...)
	if len(es) == 0 {
		delete(j.early, trace)
	} else {
		j.early[trace] = es
	}
	j.nEarly--
}

// expire writes h unsplit when its wait ended before its span came.
func (j *Joiner) expire(h *held) {
	j.mu.Lock()
	hs, i := j.waiting[h.rec.TraceID], -1
	for k := range hs {
		if hs[k] == h {
			i = k
		}
	}
	if i < 0 { // joined, or flushed by Close, meanwhile
		j.mu.Unlock()
		return
	}
	j.dropWaiting(h.rec.TraceID, i)
	j.remember(&h.rec)
	j.missed(h.rec.Upstream)
	j.mu.Unlock()
	j.c.missing[missWait].Add(1)
	h.rec.EngineSpanMissing = MissingWait
	j.next.Emit(&h.rec)
}

// expireEarly forgets a span whose record did not end within the wait.
func (j *Joiner) expireEarly(trace [16]byte, e *earlySpan) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, x := range j.early[trace] {
		if x == e {
			j.dropEarly(trace, k)
			j.c.spans[spanUnmatched].Add(1)
			return
		}
	}
}

// keepStage keeps a stage span the engine's request span of the trace
// will be read with, for as long as a span is kept for its record.
func (j *Joiner) keepStage(trace [16]byte, sp *tracepb.Span) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if s := j.stages[trace]; s != nil {
		engines.ReadStageSpan(sp, &s.st)
		return
	}
	var st engines.StageSpans
	if j.closed || len(j.stages) >= j.opts.MaxWaiting || !engines.ReadStageSpan(sp, &st) {
		return
	}
	s := &stageSpans{st: st}
	j.stages[trace] = s
	s.timer = j.opts.Clock.AfterFunc(j.opts.Wait, func() {
		j.mu.Lock()
		if j.stages[trace] == s {
			delete(j.stages, trace)
		}
		j.mu.Unlock()
	})
}

// takeStages removes and returns the stage spans kept for trace. Called
// with mu held.
func (j *Joiner) takeStages(trace [16]byte) engines.StageSpans {
	s := j.stages[trace]
	if s == nil {
		return engines.StageSpans{}
	}
	delete(j.stages, trace)
	s.timer.Stop()
	return s.st
}

// join splits r's upstream window with the span's durations.
func (j *Joiner) join(r *record.Record, rep *engines.SpanReport, st engines.StageSpans) {
	j.c.spans[spanJoined].Add(1)
	if rep.Apply(&r.Timeline, st) {
		r.EngineSource = engines.SourceOTLP
	}
	if r.TokensIn == 0 && rep.PromptTokens > 0 {
		r.TokensIn = rep.PromptTokens
	}
}

// remember notes that r was written, so a span for it that comes later is
// counted late. Called with mu held.
func (j *Joiner) remember(r *record.Record) { j.recent.add(r.TraceID, r.SpanID, r.Upstream) }

// learned notes that upstream's engine sends spans. Called with mu held.
func (j *Joiner) learned(upstream string) {
	st := j.state(upstream)
	if st.misses >= silentAfter && j.opts.Log != nil {
		j.opts.Log.Info().Str("upstream", upstream).Msg("engine spans arrive again: the upstream's records wait for them")
	}
	st.joined, st.misses = true, 0
}

// missed notes a record of upstream written without its span. Called with
// mu held.
func (j *Joiner) missed(upstream string) {
	st := j.state(upstream)
	st.misses++
	if st.misses == silentAfter && j.opts.Log != nil {
		j.opts.Log.Warn().Str("upstream", upstream).Int("records", silentAfter).Dur("wait", j.opts.Wait).
			Msg("no engine span joined the upstream's last records: its records are written without waiting until a span of it arrives (is its engine pointed at --receive-otlp-grpc or --receive-otlp-http?)")
	}
}

func (j *Joiner) state(upstream string) *upstreamState {
	st := j.upstreams[upstream]
	if st == nil {
		st = &upstreamState{}
		j.upstreams[upstream] = st
	}
	return st
}

// Close writes every waiting record: those whose span comes before ctx
// ends are joined as usual, the rest are written unsplit (engine_span_missing
// "shutdown"). Records emitted after Close go straight through.
func (j *Joiner) Close(ctx context.Context) {
	j.mu.Lock()
	if j.n > 0 && ctx.Err() == nil {
		drained := make(chan struct{})
		j.drained = drained
		j.mu.Unlock()
		select {
		case <-drained:
		case <-ctx.Done():
		}
		j.mu.Lock()
	}
	j.closed, j.drained = true, nil
	var rest []*held
	for trace, hs := range j.waiting {
		rest = append(rest, hs...)
		delete(j.waiting, trace)
	}
	j.n, j.bytes = 0, 0
	clear(j.ids)
	for trace, es := range j.early {
		for _, e := range es {
			e.timer.Stop()
		}
		delete(j.early, trace)
	}
	j.nEarly = 0
	for trace, st := range j.stages {
		st.timer.Stop()
		delete(j.stages, trace)
	}
	j.mu.Unlock()
	for _, h := range rest {
		h.timer.Stop()
		j.c.missing[missShutdown].Add(1)
		h.rec.EngineSpanMissing = MissingShutdown
		j.next.Emit(&h.rec)
	}
}

// Waits reports whether the record of request id is waiting for its span.
func (j *Joiner) Waits(id string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.ids[id]
	return ok
}

// Waiting returns the records waiting for their span now.
func (j *Joiner) Waiting() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// memOf estimates the memory of r's strings.
func memOf(r *record.Record) int64 {
	return int64(len(r.RequestID) + len(r.Method) + len(r.Path) + len(r.Model) + len(r.Upstream) +
		len(r.Engine) + len(r.Key) + len(r.Error))
}

// counters are the joiner's counts (metrics.go exports them).
type counters struct {
	held    atomic.Uint64
	spans   [numSpanResults]atomic.Uint64
	missing [numMissing]atomic.Uint64
}

const (
	spanJoined = iota
	spanLate
	spanUnmatched
	numSpanResults
)

const (
	missWait = iota
	missFull
	missShutdown
	numMissing
)
