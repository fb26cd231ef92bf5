package exporters

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
)

// LogOptions configures a LogSink. The zero value is ready to use.
type LogOptions struct {
	// BufferBytes bounds the lines waiting for the writer; a line that does
	// not fit is dropped and counted. Default 4 MiB: about 4000 lines, some
	// seconds of a stalled stdout at a thousand requests per second. The
	// sink holds two such buffers (one filling, one being written).
	BufferBytes int
	// CloseTimeout bounds how long Close waits for waiting lines to be
	// written. Default 5 s. A writer blocked longer than that is left
	// behind: the sink's goroutine ends when the writer returns.
	CloseTimeout time.Duration

	writeSpacing time.Duration // tests; 0: defaultWriteSpacing
}

func (o *LogOptions) normalize() {
	if o.BufferBytes <= 0 {
		o.BufferBytes = 4 << 20
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
	if o.writeSpacing <= 0 {
		o.writeSpacing = defaultWriteSpacing
	}
}

// LogSink writes one zerolog JSON line per record, with the fields
// (record.Field) that apply to the request. Emit formats the line on the
// caller's goroutine and appends it to a bounded buffer under a short
// mutex (a memcpy); one goroutine swaps that buffer for an empty one and
// writes the full one with a single Write, at most one every
// defaultWriteSpacing. A line that does not fit is
// dropped and counted (Dropped), so a slow or stuck writer never blocks a
// request. Lines are never split across writes; several lines may share
// one Write.
//
// Zerolog's diode writer is not used: it allocates a copy of every line,
// reports drops only when its reader catches up (never, with a stuck
// writer, so the count is lost), and closes the wrapped writer on Close.
// The double buffer here allocates nothing in steady state.
//
// A LogSink is safe for concurrent use. Emit after Close drops the line
// (and counts it).
type LogSink struct {
	opts   LogOptions
	out    io.Writer
	logger zerolog.Logger

	mu     sync.Mutex
	buf    []byte // lines waiting for the writer, guarded by mu
	lines  int    // lines in buf, guarded by mu
	closed bool   // guarded by mu
	once   sync.Once

	wake    chan struct{} // capacity 1: "buf is not empty, or closed"
	closing chan struct{} // closed by Close: the writer waits no more
	done    chan struct{} // closed when the writer goroutine returns

	dropped atomic.Uint64
	written atomic.Uint64
}

// NewLogSink returns a sink writing JSON lines to w and starts its writer
// goroutine; call Close to stop it. w is never closed by the sink and is
// written from one goroutine only.
func NewLogSink(w io.Writer, opts LogOptions) *LogSink {
	opts.normalize()
	s := &LogSink{
		opts:    opts,
		out:     w,
		buf:     make([]byte, 0, opts.BufferBytes),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.logger = zerolog.New(bufferWriter{s})
	go s.run()
	return s
}

// Dropped returns how many lines were dropped so far: the buffer was full,
// the sink was closed, or the writer returned an error for them.
func (s *LogSink) Dropped() uint64 { return s.dropped.Load() }

// Written returns how many lines the writer accepted so far.
func (s *LogSink) Written() uint64 { return s.written.Load() }

// ErrCloseTimeout is returned by Close when the writer did not take the
// waiting lines within LogOptions.CloseTimeout.
var ErrCloseTimeout = errors.New("exporters: log writer did not drain before the close timeout")

// Close stops accepting lines, writes the waiting ones and stops the
// writer goroutine. It returns ErrCloseTimeout if that took longer than
// CloseTimeout; the goroutine then ends as soon as the writer returns.
// Close is idempotent; later calls return nil at once.
func (s *LogSink) Close() error {
	first := false
	s.once.Do(func() {
		first = true
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.closing)
		s.signal()
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

func (s *LogSink) signal() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// bufferWriter is the zerolog writer: it copies the finished line (zerolog
// reuses its buffer) into the sink's buffer, or drops it.
type bufferWriter struct{ s *LogSink }

func (w bufferWriter) Write(p []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	if s.closed || len(s.buf)+len(p) > s.opts.BufferBytes {
		s.mu.Unlock()
		s.dropped.Add(1)
		return len(p), nil
	}
	s.buf = append(s.buf, p...)
	s.lines++
	s.mu.Unlock()
	s.signal()
	return len(p), nil
}

// defaultWriteSpacing is the least time between two writes: a line waits at most
// this long, and under load the lines of that time go out in one write. A
// write to a file enters the kernel through the runtime's system-call path,
// which wakes the runtime's monitor thread when it sleeps, for about a
// millisecond of 20 µs naps; one write per request kept it awake at a few
// thousand requests a second (15 % of the CPU per request).
const defaultWriteSpacing = 10 * time.Millisecond

// run swaps the filled buffer for the spare one and writes it, until the
// sink is closed and drained.
func (s *LogSink) run() {
	defer close(s.done)
	spare := make([]byte, 0, s.opts.BufferBytes)
	var last time.Time
	spacing := time.NewTimer(time.Hour)
	spacing.Stop()
	for range s.wake {
		if wait := s.opts.writeSpacing - time.Since(last); wait > 0 {
			spacing.Reset(wait)
			select { // the lines arriving meanwhile go in this write
			case <-spacing.C:
			case <-s.closing:
				spacing.Stop()
			}
		}
		last = time.Now()
		s.mu.Lock()
		full, lines, closed := s.buf, s.lines, s.closed
		s.buf, s.lines = spare[:0], 0
		s.mu.Unlock()
		s.write(full, lines)
		spare = full
		if closed {
			// No line is accepted after closed was set, and this batch was
			// taken after it: nothing is left.
			return
		}
	}
}

// write writes lines whole lines in b. Lines a failed write did not take
// entirely are counted as dropped.
func (s *LogSink) write(b []byte, lines int) {
	if lines == 0 {
		return
	}
	n, err := s.out.Write(b)
	if err != nil || n < len(b) {
		ok := countLines(b[:max(min(n, len(b)), 0)])
		s.written.Add(uint64(ok))
		s.dropped.Add(uint64(lines - ok))
		return
	}
	s.written.Add(uint64(lines))
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

// maxPooledScratch bounds the scratch buffers kept for reuse, so one huge
// record does not pin memory: a pooled buffer keeps the capacity it grew to.
const maxPooledScratch = 16 << 10

// scratch holds per-Emit buffers for fields built as raw JSON.
type scratch struct{ b []byte }

var scratchPool = sync.Pool{New: func() any { return &scratch{b: make([]byte, 0, 512)} }}

// Emit formats r as one JSON line and queues it. It never blocks on the
// writer and does not keep r. It sorts r.Stream's gaps in place
// (stages.Stream.Gaps).
func (s *LogSink) Emit(r *record.Record) {
	sc := scratchPool.Get().(*scratch)
	e := s.logger.Log()
	writeLine(e, r, sc)
	e.Send()
	if cap(sc.b) <= maxPooledScratch {
		scratchPool.Put(sc)
	}
}

// writeLine adds r's fields to e, in record.Field order. It allocates
// nothing.
func writeLine(e *zerolog.Event, r *record.Record, sc *scratch) {
	src := fieldSource{r: r, breakdown: r.Breakdown(), gaps: r.Stream.Gaps()}
	writeFields(e, &src, inLog, sc)
}

// level is the line's level: warn for failures the operator should look at.
func level(r endreason.Reason) string {
	switch r {
	case endreason.WorkerFailure, endreason.UpstreamDisconnect, endreason.Deadline:
		return "warn"
	}
	return "info"
}
