package exporters

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// LogOptions configures a LogSink. The zero value is ready to use.
type LogOptions struct {
	// QueueLines is how many finished lines may wait for the writer before
	// new lines are dropped (and counted). Default 8192: at ~1 KiB a line
	// that is at most ~8 MiB of memory, and some seconds of a stalled stdout
	// at a few thousand requests per second.
	QueueLines int
	// BatchBytes caps how many queued lines the writer goroutine joins into
	// one Write call. Default 64 KiB. Lines are never split across writes.
	BatchBytes int
	// CloseTimeout bounds how long Close waits for queued lines to be
	// written. Default 5 s. A writer blocked longer than that is left
	// behind: its goroutine ends when the writer returns.
	CloseTimeout time.Duration
}

func (o *LogOptions) normalize() {
	if o.QueueLines <= 0 {
		o.QueueLines = 8192
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 64 << 10
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
}

// maxPooledLine bounds the line buffers kept for reuse, so one huge line
// (a long error text) does not pin memory (golang.org/issue/23199).
const maxPooledLine = 16 << 10

// LogSink writes one zerolog JSON line per record (DESIGN §4). Emit formats
// the line on the caller's goroutine and hands it to a bounded queue; one
// goroutine writes queued lines to the underlying writer. When the queue is
// full the line is dropped and counted (Dropped), so a slow or stuck writer
// never blocks a request. Zerolog's diode writer is not used: it copies each
// line into a fresh allocation, reports drops only when its reader catches
// up (never, with a stuck writer), and closes the wrapped writer on Close.
//
// A LogSink is safe for concurrent use. Emit after Close drops the line
// (and counts it).
type LogSink struct {
	opts   LogOptions
	out    io.Writer
	logger zerolog.Logger

	queue chan *[]byte
	bufs  sync.Pool // *[]byte line buffers
	// mu orders Emit against Close: Emit holds it shared while enqueueing,
	// Close takes it exclusively to set closed.
	mu     sync.RWMutex
	closed bool
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	dropped atomic.Uint64
	written atomic.Uint64
}

// NewLogSink returns a sink writing JSON lines to w and starts its writer
// goroutine; call Close to stop it. w is never closed by the sink and is
// written from one goroutine only.
func NewLogSink(w io.Writer, opts LogOptions) *LogSink {
	opts.normalize()
	s := &LogSink{
		opts:  opts,
		out:   w,
		queue: make(chan *[]byte, opts.QueueLines),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	s.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	s.logger = zerolog.New(queueWriter{s})
	go s.run()
	return s
}

// Dropped returns how many lines were dropped so far: the queue was full,
// the sink was closed, or the writer returned an error for them.
func (s *LogSink) Dropped() uint64 { return s.dropped.Load() }

// Written returns how many lines the writer accepted so far.
func (s *LogSink) Written() uint64 { return s.written.Load() }

// ErrCloseTimeout is returned by Close when the writer did not take the
// queued lines within LogOptions.CloseTimeout.
var ErrCloseTimeout = errors.New("exporters: log writer did not drain before the close timeout")

// Close stops accepting lines, writes the queued ones and stops the writer
// goroutine. It returns ErrCloseTimeout if that took longer than
// CloseTimeout; the goroutine then ends as soon as the writer returns.
// Close is idempotent; later calls return nil.
func (s *LogSink) Close() error {
	first := false
	s.once.Do(func() {
		first = true
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.stop)
	})
	if !first {
		return nil
	}
	t := time.NewTimer(s.opts.CloseTimeout)
	defer t.Stop()
	select {
	case <-s.done:
		return nil
	case <-t.C:
		return ErrCloseTimeout
	}
}

// queueWriter is the zerolog writer: it copies the finished line (zerolog
// reuses its buffer) into a pooled buffer and queues it without blocking.
type queueWriter struct{ s *LogSink }

func (q queueWriter) Write(p []byte) (int, error) {
	s := q.s
	bp := s.bufs.Get().(*[]byte)
	*bp = append((*bp)[:0], p...)
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		s.drop(bp, 1)
		return len(p), nil
	}
	select {
	case s.queue <- bp:
	default:
		s.drop(bp, 1)
	}
	s.mu.RUnlock()
	return len(p), nil
}

func (s *LogSink) drop(bp *[]byte, n uint64) {
	s.dropped.Add(n)
	s.put(bp)
}

func (s *LogSink) put(bp *[]byte) {
	if cap(*bp) <= maxPooledLine {
		s.bufs.Put(bp)
	}
}

// run writes queued lines, joining those already waiting into one Write of
// at most BatchBytes. After stop it drains the queue and returns.
func (s *LogSink) run() {
	defer close(s.done)
	batch := make([]byte, 0, s.opts.BatchBytes)
	for {
		var bp *[]byte
		select {
		case bp = <-s.queue:
		case <-s.stop:
			// Close set closed before closing stop, so nothing more is
			// queued: drain what is there.
			for {
				select {
				case bp = <-s.queue:
					batch = s.flushIfFull(batch, bp)
				default:
					s.write(batch)
					return
				}
			}
		}
		batch = s.flushIfFull(batch, bp)
	more:
		for len(batch) < s.opts.BatchBytes {
			select {
			case bp = <-s.queue:
				batch = s.flushIfFull(batch, bp)
			default:
				break more
			}
		}
		batch = s.write(batch)
	}
}

// flushIfFull appends the line bp to batch, writing batch first if the
// line would not fit.
func (s *LogSink) flushIfFull(batch []byte, bp *[]byte) []byte {
	if len(batch) > 0 && len(batch)+len(*bp) > s.opts.BatchBytes {
		batch = s.write(batch)
	}
	batch = append(batch, *bp...)
	s.put(bp)
	return batch
}

// write writes batch (whole lines) and returns it emptied. Lines a failed
// write did not take entirely are counted as dropped.
func (s *LogSink) write(batch []byte) []byte {
	if len(batch) == 0 {
		return batch
	}
	lines := uint64(countLines(batch))
	n, err := s.out.Write(batch)
	if err != nil || n < len(batch) {
		ok := uint64(countLines(batch[:max(n, 0)]))
		s.written.Add(ok)
		s.dropped.Add(lines - ok)
	} else {
		s.written.Add(lines)
	}
	if cap(batch) > 4*s.opts.BatchBytes {
		return make([]byte, 0, s.opts.BatchBytes)
	}
	return batch[:0]
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// scratch holds per-Emit buffers for fields built as raw JSON.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 512)} }}

// Emit formats r as one JSON line and queues it. It never blocks on the
// writer and does not keep r. It sorts r.Stream's gaps in place
// (stages.Stream.Gaps).
func (s *LogSink) Emit(r *record.Record) {
	sc := scratchPool.Get().(*scratch)
	e := s.logger.Log()
	buildLine(e, r, sc)
	e.Send()
	if cap(sc.b) <= maxPooledLine {
		scratchPool.Put(sc)
	}
}

// level is the line's level: warn for failures the operator should look at.
func level(r endreason.Reason) string {
	switch r {
	case endreason.WorkerFailure, endreason.UpstreamDisconnect, endreason.Deadline:
		return "warn"
	}
	return "info"
}

// buildLine adds r's fields to e. Field names are the log contract
// (issue 2); see the README of the package for the list.
func buildLine(e *zerolog.Event, r *record.Record, sc *scratch) {
	b := sc.b[:0]
	b = append(b, '"')
	b = r.Timeline.Wall().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	e.RawJSON("time", b)
	e.Str("level", level(r.Reason))
	e.Str("msg", "request")
	e.Str("request_id", r.RequestID)
	e.Hex("trace_id", r.TraceID[:])
	e.Hex("span_id", r.SpanID[:])
	if !r.ParentID.IsZero() {
		e.Hex("parent_span_id", r.ParentID[:])
	}
	e.Str("method", r.Method)
	e.Str("path", r.Path)
	e.Str("model", r.Model)
	e.Bool("stream", r.Streaming)
	e.Int("status", r.Status)
	e.Str("upstream", r.Upstream)
	if r.Key != "" {
		e.Str("key", r.Key)
	}
	e.Str("end_reason", r.Reason.String())
	e.Str("end_detail", string(r.Detail))
	cancel := r.Reason == endreason.ClientCancel
	if cancel {
		e.Str("phase", r.Phase.String())
	}
	if r.Error != "" {
		e.Str("error", r.Error)
	}

	bd := r.Breakdown()
	var us [stages.NumStages]int64
	var ttftUS int64
	if bd.OK {
		ttftUS = splitMicros(&us, &bd)
		b = appendMillis(b[:0], ttftUS)
		e.RawJSON("ttft_ms", b)
	}
	b = appendMillis(b[:0], micros(r.E2E()))
	e.RawJSON("e2e_ms", b)
	if bd.OK {
		b = append(b[:0], '{')
		for i := range stages.NumStages {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, stages.Stage(i).String()...)
			b = append(b, '"', ':')
			b = appendMillis(b, us[i])
		}
		b = append(b, '}')
		e.RawJSON("stages_ms", b)
		if bd.Unsplit {
			e.Bool("upstream_unsplit", true)
		}
		if bd.Inconsistent {
			e.Bool("engine_report_inconsistent", true)
		}
	}
	if r.Timeline.EngineReported() {
		b = append(b[:0], '{')
		first := true
		for d := range stages.NumEngineDurs {
			v, ok := r.Timeline.Engine(stages.EngineDur(d))
			if !ok {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = append(b, stages.EngineDur(d).String()...)
			b = append(b, '"', ':')
			b = appendMillis(b, micros(v))
		}
		b = append(b, '}')
		e.RawJSON("engine_ms", b)
	}
	if r.EngineSource != "" {
		e.Str("engine_report", r.EngineSource)
	}
	e.Int("tokens_out", r.TokensOut)
	if r.TokensIn != 0 {
		e.Int("tokens_in", r.TokensIn)
	}
	if g := r.Stream.Gaps(); g.N > 0 {
		b = append(b[:0], `{"p50":`...)
		b = appendMillis(b, micros(g.P50))
		b = append(b, `,"p99":`...)
		b = appendMillis(b, micros(g.P99))
		b = append(b, `,"max":`...)
		b = appendMillis(b, micros(g.Max))
		b = append(b, '}')
		e.RawJSON("itl_ms", b)
	}
	if r.Stream.Stalls != 0 {
		e.Int("stalls", r.Stream.Stalls)
	}
	e.Int("events", r.Stream.Events)
	e.Int64("bytes_in", r.BytesIn)
	e.Int64("bytes_out", r.BytesOut)
	if cancel {
		b = appendMillis(b[:0], micros(r.CancelToClose))
		e.RawJSON("cancel_to_close_ms", b)
		e.Int("tokens_after_cancel", r.TokensAfterCancel)
	}
	sc.b = b
}

// micros rounds d to whole microseconds, half away from zero.
func micros(d time.Duration) int64 {
	if d < 0 {
		return -((-int64(d) + 500) / 1000)
	}
	return (int64(d) + 500) / 1000
}

// splitMicros rounds bd's stages to whole microseconds so that they add up
// exactly to the rounded TTFT, which it returns.
//
// Rounding each stage on its own can make the sum drift from the rounded
// TTFT by up to half a microsecond per stage (4 µs over 8 stages), which
// would break the identity the log promises ("stages_ms adds up to ttft_ms
// to the microsecond"). Instead the stage boundaries are rounded: with
// C_k = stage_0 + … + stage_k (nanoseconds, exact), stage k becomes
// round(C_k) - round(C_{k-1}). The sum telescopes to round(C_7) =
// round(TTFT) exactly, each stage is within 1 µs of its true value, and no
// stage goes negative because rounding is monotone and C_k never decreases
// (stages.Breakdown never yields a negative stage; a negative one would be
// a bug there and is clamped to 0 here rather than logged).
func splitMicros(us *[stages.NumStages]int64, bd *stages.Breakdown) int64 {
	var cum time.Duration
	var prev int64
	for i, d := range bd.Stages {
		cum += max(d, 0)
		r := micros(cum)
		us[i] = r - prev
		prev = r
	}
	return prev
}

// appendMillis appends us microseconds as milliseconds with up to three
// decimals, exactly ("12.345", "0.007", "3"), without float rounding.
func appendMillis(b []byte, us int64) []byte {
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	for b[len(b)-1] == '0' {
		b = b[:len(b)-1]
	}
	return b
}
