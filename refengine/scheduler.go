package refengine

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/refengine/model"
)

// Control values a handler sets on a request to make the scheduler drop it.
const (
	ctlNone  int32 = iota
	ctlAbort       // the client left: drop, the handler counts it as an abort
	ctlDrop        // the handler already decided how the request ends: drop quietly
)

// Finish reasons (vLLM's engine strings plus content_filter).
const (
	finishStop          = "stop"
	finishLength        = "length"
	finishAbort         = "abort"
	finishError         = "error"
	finishContentFilter = "content_filter"
)

// request is one generation request, shared between its HTTP handler and the
// scheduler goroutine. Fields are grouped by owner.
type request struct {
	// Set by the handler before submit, read-only afterwards.
	id          string
	prompt      []int
	maxTokens   int
	temperature float32
	topP        float32
	ignoreEOS   bool
	rng         *rand.Rand
	faults      Faults
	submitted   time.Time // arrival at the scheduler
	notBefore   time.Time // queue_delay fault: not admitted before this

	// Set by the handler at any time, read by the scheduler.
	ctl  atomic.Int32 // ctlNone, ctlAbort, ctlDrop
	gone atomic.Bool  // the client left (also with keep_decoding or ignore_disconnect)

	// Owned by the scheduler goroutine.
	kv          *model.Seq
	tokens      []int // prompt + generated; tokens[:computed] have KV entries
	computed    int
	logits      []float32
	started     bool
	prefilled   bool
	publish     bool // publish the computed prefix to the prefix cache after each step of this prefill
	admitted    bool
	generated   int
	syncAcc     time.Duration
	firstSched  time.Time
	prefillDone time.Time
	lastTokenAt time.Time

	// Outbox, guarded by mu, written by the scheduler, drained by the handler.
	mu        sync.Mutex
	out       []int
	finished  bool
	finish    string
	errMsg    string
	truth     schedTruth // valid once firstTok is true
	firstTok  bool
	scheduled bool // the scheduler has put it in a step (its prefill began)
	afterGone int  // tokens produced after the client left
	notify    chan struct{}
}

// schedTruth is the scheduler's share of a request's ground truth.
type schedTruth struct {
	Queue        time.Duration // submitted → first scheduled
	Prefill      time.Duration // first scheduled → last prompt token computed
	Sync         time.Duration // barrier waits during its prefill steps
	FirstDecode  time.Duration // → first generated token sampled
	CachedTokens int
	Preemptions  int
	FirstTokenAt time.Time
	LastTokenAt  time.Time
	FirstSched   time.Time
	Generated    int
}

func newRequest() *request {
	return &request{notify: make(chan struct{}, 1)}
}

// emit hands a token (tok >= 0) and/or a finish reason to the handler, to
// be woken by signal (or the scheduler's waker). It never blocks.
func (r *request) emit(tok int, finish, errMsg string, met *metrics) {
	r.mu.Lock()
	if tok >= 0 {
		r.out = append(r.out, tok)
		if r.gone.Load() {
			r.afterGone++
			met.tokensAfterGone.Add(1)
			if r.faults.stopsAfterGone(r.afterGone) {
				r.ctl.CompareAndSwap(ctlNone, ctlAbort) // dropped at the next sweep
			}
		}
	}
	if finish != "" && !r.finished {
		r.finished = true
		r.finish = finish
		r.errMsg = errMsg
		r.truth.LastTokenAt = r.lastTokenAt
		r.truth.Generated = r.generated
	}
	r.mu.Unlock()
}

// markScheduled tells the handler the request's prefill is starting, to be
// woken by signal (or the scheduler's waker).
func (r *request) markScheduled() {
	r.mu.Lock()
	r.scheduled = true
	r.mu.Unlock()
}

// signal wakes r's handler. It never blocks.
func (r *request) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// scheduler runs continuous batching on one goroutine: the only caller of
// model.Step and the only user of the block pool after start.
type scheduler struct {
	m              *model.Model
	pool           *model.BlockPool
	maxRunning     int
	maxBatchTokens int
	maxSeq         int
	eos            int
	vocab          int
	serverFaults   Faults
	met            *metrics

	mu       sync.Mutex
	closed   bool // set by shutdown: submit fails requests at once
	incoming []*request
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}

	// Scheduler goroutine only.
	waiting    []*request
	running    []*request
	entries    []model.StepEntry
	batch      []*request
	stragRank  int
	stragDelay time.Duration
	waker      *waker // wakes the handlers the scheduler has news for

	// Observable from other goroutines.
	kvFree atomic.Int64
	steps  atomic.Int64
}

func newScheduler(m *model.Model, pool *model.BlockPool, cfg *Config, eos int, serverFaults Faults, met *metrics) (*scheduler, error) {
	k, err := newWaker()
	if err != nil {
		return nil, err
	}
	s := &scheduler{
		waker:          k,
		m:              m,
		pool:           pool,
		maxRunning:     cfg.MaxRunning,
		maxBatchTokens: cfg.MaxBatchTokens,
		maxSeq:         m.Cfg.MaxSeq,
		eos:            eos,
		vocab:          m.Cfg.Vocab,
		serverFaults:   serverFaults,
		met:            met,
		wake:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
		stragRank:      -1,
	}
	s.kvFree.Store(int64(pool.Free()))
	return s, nil
}

// submit queues r for scheduling. It never blocks. After close, r ends at
// once with finish reason error.
func (s *scheduler) submit(r *request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		r.emit(-1, finishError, "engine shutting down", s.met)
		r.signal()
		return
	}
	s.incoming = append(s.incoming, r)
	s.mu.Unlock()
	s.met.waiting.Inc()
	s.poke()
}

// poke wakes the scheduler if it is idle.
func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close stops the scheduler and waits for it; every unfinished request ends
// with finish reason error.
func (s *scheduler) close() {
	close(s.stop)
	<-s.done
}

func (s *scheduler) run() {
	defer close(s.done)
	var wakes sync.WaitGroup
	wakes.Go(s.waker.run)
	defer func() {
		s.waker.close()
		wakes.Wait()
		_ = s.waker.r.Close()
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		s.waiting = append(s.waiting, s.incoming...)
		clear(s.incoming)
		s.incoming = s.incoming[:0]
		s.mu.Unlock()

		s.sweep()
		select {
		case <-s.stop:
			s.shutdown()
			return
		default:
		}
		stepped := s.step()
		s.waker.flush()
		if stepped {
			continue
		}
		// Nothing could run: sleep until a submit, a cancel, or the
		// earliest delayed request becomes eligible.
		var tc <-chan time.Time
		if next, ok := s.nextEligible(); ok {
			d := time.Until(next)
			if d < 0 {
				d = 0
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			tc = timer.C
		}
		select {
		case <-s.wake:
		case <-tc:
		case <-s.stop:
			s.shutdown()
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (s *scheduler) nextEligible() (time.Time, bool) {
	var t time.Time
	for _, r := range s.waiting {
		if t.IsZero() || r.notBefore.Before(t) {
			t = r.notBefore
		}
	}
	return t, !t.IsZero()
}

// sweep drops requests whose handler asked for it, freeing their blocks.
func (s *scheduler) sweep() {
	drop := func(list []*request) []*request {
		return slices.DeleteFunc(list, func(r *request) bool {
			c := r.ctl.Load()
			if c == ctlNone {
				return false
			}
			if r.kv != nil {
				s.pool.Release(r.kv)
				r.kv = nil
			}
			r.emit(-1, finishAbort, "", s.met)
			s.waker.add(r)
			return true
		})
	}
	nr, nw := len(s.running), len(s.waiting)
	s.running = drop(s.running)
	s.waiting = drop(s.waiting)
	s.met.running.Add(float64(len(s.running) - nr))
	s.met.waiting.Add(float64(len(s.waiting) - nw))
	s.updateKV()
}

func (s *scheduler) updateKV() {
	s.kvFree.Store(int64(s.pool.Free()))
}

func (s *scheduler) shutdown() {
	s.mu.Lock()
	s.closed = true
	s.waiting = append(s.waiting, s.incoming...)
	s.incoming = nil
	s.mu.Unlock()
	for _, r := range append(s.running, s.waiting...) {
		if r.kv != nil {
			s.pool.Release(r.kv)
			r.kv = nil
		}
		r.emit(-1, finishError, "engine shutting down", s.met)
		r.signal()
	}
	s.met.running.Sub(float64(len(s.running)))
	s.met.waiting.Sub(float64(len(s.waiting)))
	s.running, s.waiting = nil, nil
	s.updateKV()
}

// preempt releases r's blocks and puts it at the front of the waiting queue;
// it will recompute its tokens when readmitted (vLLM's recompute mode).
func (s *scheduler) preempt(r *request) {
	s.pool.Release(r.kv)
	r.kv = nil
	r.computed = 0
	i := slices.Index(s.running, r)
	s.running = slices.Delete(s.running, i, i+1)
	s.waiting = slices.Insert(s.waiting, 0, r)
	r.mu.Lock()
	r.truth.Preemptions++
	r.mu.Unlock()
	s.met.running.Dec()
	s.met.waiting.Inc()
	s.met.preemptions.Inc()
}

// step schedules and runs one model step. It reports false if nothing could
// be scheduled.
func (s *scheduler) step() bool {
	now := time.Now()
	s.entries = s.entries[:0]
	s.batch = s.batch[:0]
	budget := s.scheduleRunning(s.maxBatchTokens)
	s.admitWaiting(now, budget)
	if len(s.entries) == 0 {
		s.updateKV()
		return false
	}
	s.setStraggler()
	for _, r := range s.batch {
		if !r.started {
			r.markScheduled()
			s.waker.add(r)
		}
	}
	s.waker.flush() // the handlers say the prefill began while it runs

	t0 := time.Now()
	st := s.m.Step(s.entries)
	t1 := time.Now()
	if extra := s.prefillStretch(t1.Sub(t0)); extra > 0 {
		s.pause(extra)
		t1 = time.Now()
	}
	s.steps.Add(1)

	for i, r := range s.batch {
		if s.recordStep(r, len(s.entries[i].Tokens), st.Sync, t0, t1) {
			s.sampleNext(r)
		}
	}
	clear(s.entries) // drop references to sequences and buffers
	clear(s.batch)
	s.updateKV()
	return true
}

// prefillStretch is how much longer a step that computed the batch in d
// lasts for the slow_prefill faults in it: each token in the step is taken
// to cost the same share of d, and a prompt token of a request with the
// fault costs F times its share. Decode tokens are not stretched (they wait
// for the step all the same, as decodes batched with a slow prefill do).
func (s *scheduler) prefillStretch(d time.Duration) time.Duration {
	total, extra := 0, 0.0
	for i, r := range s.batch {
		n := len(s.entries[i].Tokens)
		total += n
		if f := r.faults.SlowPrefill; f > 1 && !r.prefilled {
			extra += (f - 1) * float64(n)
		}
	}
	if total == 0 || extra == 0 {
		return 0
	}
	return time.Duration(float64(d) * extra / float64(total))
}

// pause holds the scheduler for d, or until it is stopped.
func (s *scheduler) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}

// addToBatch puts the next n tokens of r to compute in the coming step,
// with a logits buffer when they are its last.
func (s *scheduler) addToBatch(r *request, n int) {
	e := model.StepEntry{Seq: r.kv, Tokens: r.tokens[r.computed : r.computed+n]}
	if r.computed+n == len(r.tokens) {
		if r.logits == nil {
			r.logits = make([]float32, s.vocab)
		}
		e.Logits = r.logits
	}
	s.entries = append(s.entries, e)
	s.batch = append(s.batch, r)
}

// scheduleRunning batches the running sequences first, oldest first:
// decodes (1 token) and the next chunks of prefills in progress, preempting
// the newest when the pool runs out of blocks. It returns the token budget
// left.
func (s *scheduler) scheduleRunning(budget int) int {
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		n := min(len(r.tokens)-r.computed, budget)
		for !s.pool.Reserve(r.kv, n) {
			victim := s.running[len(s.running)-1]
			s.preempt(victim)
			if victim == r {
				return budget
			}
		}
		s.addToBatch(r, n)
		budget -= n
	}
	return budget
}

// admitWaiting admits waiting requests eligible at now (FCFS among them)
// while there is room in the batch, budget in the step and blocks in the
// pool. A request that could never fit in the pool ends with an error.
func (s *scheduler) admitWaiting(now time.Time, budget int) {
	for i := 0; i < len(s.waiting) && len(s.running) < s.maxRunning && budget > 0; {
		r := s.waiting[i]
		if now.Before(r.notBefore) {
			i++
			continue
		}
		kv := s.pool.NewSeq()
		cached := s.pool.AttachPrefix(kv, r.tokens)
		need := len(r.tokens) - cached
		if !s.pool.Reserve(kv, need) {
			s.pool.Release(kv)
			if len(s.running) == 0 && len(s.entries) == 0 && s.pool.Free() == s.pool.Total() {
				// Cannot ever fit: fail it rather than wait forever.
				s.waiting = slices.Delete(s.waiting, i, i+1)
				s.met.waiting.Dec()
				r.emit(-1, finishError, "prompt does not fit in the KV cache", s.met)
				s.waker.add(r)
				continue
			}
			return
		}
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.admit(r, kv, cached)
		n := min(need, budget)
		s.addToBatch(r, n)
		budget -= n
	}
}

// admit moves r, taken off the waiting queue, to running with its sequence
// kv, whose first cached tokens came from the prefix cache. The prefix
// cache's counters count r's first admission only.
func (s *scheduler) admit(r *request, kv *model.Seq, cached int) {
	s.running = append(s.running, r)
	s.met.waiting.Dec()
	s.met.running.Inc()
	r.kv = kv
	r.computed = cached
	r.publish = true
	if !r.admitted {
		r.admitted = true
		r.mu.Lock()
		r.truth.CachedTokens = cached
		r.mu.Unlock()
		s.met.prefixQueries.Add(float64(len(r.tokens)))
		s.met.prefixHits.Add(float64(cached))
	}
}

// recordStep records that the step from t0 to t1 (sync: its barrier waits)
// computed n more of r's tokens, and reports whether they are all computed
// now, so the next token is to sample. Each step of a prefill publishes the
// full blocks computed so far to the prefix cache, so a request of the same
// prompt admitted while a long prompt is still in its chunks finds what is
// done instead of computing it all again. SGLang caches a chunked prefill
// after each chunk (Scheduler.get_next_batch_to_run calls
// tree_cache.cache_unfinished_req(chunked_req, chunked=True),
// python/sglang/srt/managers/scheduler.py); vLLM even earlier, when it
// allocates a step's blocks (KVCacheManager.allocate_slots calls
// cache_blocks, vllm/v1/core/kv_cache_manager.py), so a request admitted in
// the same step as a prefill's last chunk finds all of it there, and here
// all but that chunk.
func (s *scheduler) recordStep(r *request, n int, sync time.Duration, t0, t1 time.Time) bool {
	r.computed += n
	if !r.started {
		r.started = true
		r.firstSched = t0
	}
	if !r.prefilled {
		r.syncAcc += sync
	}
	if r.publish {
		s.pool.Publish(r.kv, r.tokens[:r.computed])
		r.publish = r.computed < len(r.tokens)
	}
	if r.computed < len(r.tokens) {
		return false // mid-prefill chunk
	}
	if !r.prefilled {
		r.prefilled = true
		r.prefillDone = t1
	}
	return true
}

// sampleNext samples r's next token and hands it to the handler; at the
// end-of-sequence token or r's length limit r finishes and leaves running.
// The first token completes r's ground truth.
func (s *scheduler) sampleNext(r *request) {
	tok := model.Sample(r.logits, r.temperature, r.topP, r.rng)
	now := time.Now()
	r.tokens = append(r.tokens, tok)
	r.generated++
	if r.generated == 1 {
		r.mu.Lock()
		r.firstTok = true
		r.truth.Queue = r.firstSched.Sub(r.submitted)
		r.truth.Prefill = r.prefillDone.Sub(r.firstSched)
		r.truth.Sync = r.syncAcc
		r.truth.FirstDecode = now.Sub(r.prefillDone)
		r.truth.FirstTokenAt = now
		r.truth.FirstSched = r.firstSched
		r.mu.Unlock()
		s.met.promptTokens.Add(float64(len(r.prompt)))
	} else {
		s.met.itl.Observe(now.Sub(r.lastTokenAt).Seconds())
	}
	r.lastTokenAt = now
	s.met.generationTokens.Inc()
	finish := ""
	switch {
	case tok == s.eos && !r.ignoreEOS:
		finish = finishStop
	case r.generated >= r.maxTokens || len(r.tokens) >= s.maxSeq:
		finish = finishLength
	}
	if finish == "" {
		r.emit(tok, "", "", s.met)
		s.waker.add(r)
		return
	}
	if tok == s.eos && !r.ignoreEOS {
		tok = -1 // the end-of-sequence token is not content
	}
	s.pool.Release(r.kv)
	r.kv = nil
	j := slices.Index(s.running, r)
	s.running = slices.Delete(s.running, j, j+1)
	s.met.running.Dec()
	r.emit(tok, finish, "", s.met)
	s.waker.add(r)
}

// setStraggler applies the straggler fault of the server or of any request
// in the coming step, and clears it when no longer wanted.
func (s *scheduler) setStraggler() {
	rank, d := s.serverFaults.StragglerRank, s.serverFaults.StragglerDelay
	for _, r := range s.batch {
		if r.faults.StragglerRank >= 0 && r.faults.StragglerDelay > d {
			rank, d = r.faults.StragglerRank, r.faults.StragglerDelay
		}
	}
	if rank >= s.m.Ranks() {
		rank = s.m.Ranks() - 1
	}
	if rank == s.stragRank && d == s.stragDelay {
		return
	}
	if s.stragRank >= 0 && s.stragRank != rank {
		s.m.SetStraggler(s.stragRank, 0)
	}
	if rank >= 0 {
		s.m.SetStraggler(rank, d)
	}
	s.stragRank, s.stragDelay = rank, d
}
