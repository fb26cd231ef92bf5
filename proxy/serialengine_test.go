package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/stages"
)

// serialEngine is an engine with one slot, shaped as Ollama is: a request
// waits for the slot in the order it arrived (Ollama's runner semaphore),
// nothing it reports covers that wait; the first request may find the model
// unloaded and load it first. It speaks Ollama's native /api/chat (NDJSON,
// durations in ns on the last line: load_duration, prompt_eval_duration,
// eval_duration, each measured as the engine spent it) or its /v1 (SSE,
// no durations at all).
type serialEngine struct {
	native  bool
	prefill time.Duration // before each request's first token
	tokens  int           // content lines, gap apart
	gap     time.Duration
	load    time.Duration // a cold load, taken by the first request

	mu      sync.Mutex
	cond    *sync.Cond
	next    int       // the next arrival's turn
	serving int       // the turn that has the slot
	arrived chan bool // one per arrival, once it has its turn; nil: none
}

func newSerialEngine(native bool, load time.Duration) *serialEngine {
	e := &serialEngine{native: native, prefill: 20 * time.Millisecond, tokens: 5, gap: 10 * time.Millisecond,
		load: load, arrived: make(chan bool, 16)}
	e.cond = sync.NewCond(&e.mu)
	return e
}

// serve is the upstream's script for one request.
func (e *serialEngine) serve(c *upConn) {
	if c.req.Method != http.MethodPost {
		// Identification (/v1/models, /api/tags) and /metrics, answered
		// without a slot, as Ollama does: they take no turn.
		c.whole(http.StatusNotFound, "text/plain", "not found")
		return
	}
	start := time.Now()
	e.mu.Lock()
	turn := e.next
	e.next++
	e.mu.Unlock()
	if e.arrived != nil {
		e.arrived <- true
	}
	if turn == 0 && e.load > 0 {
		time.Sleep(e.load) // the engine's work: loading the model
	}
	loaded := time.Since(start) // load_duration: the handler's start to the runner
	e.mu.Lock()
	for e.serving != turn {
		e.cond.Wait()
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.serving++
		e.cond.Broadcast()
		e.mu.Unlock()
	}()

	slot := time.Now()
	time.Sleep(e.prefill) // the engine's work: prefill
	prefill := time.Since(slot)
	if e.native {
		c.headers(200, "application/x-ndjson")
	} else {
		c.sse()
	}
	decode := time.Now()
	for i := range e.tokens {
		if i > 0 {
			time.Sleep(e.gap) // the engine's work: a decode step
		}
		if e.native {
			c.chunk(fmt.Sprintf(`{"model":"m","message":{"role":"assistant","content":"t%d "},"done":false}`+"\n", i))
		} else {
			c.content(fmt.Sprintf("t%d ", i))
		}
	}
	if e.native {
		c.chunk(fmt.Sprintf(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop",`+
			`"total_duration":%d,"load_duration":%d,"prompt_eval_count":3,"prompt_eval_duration":%d,"eval_count":%d,"eval_duration":%d}`+"\n",
			time.Since(start), loaded, prefill, e.tokens, time.Since(decode)))
	} else {
		c.finish("stop")
		c.done()
	}
	c.end()
}

// TestSerialEngineInferredQueue: four concurrent requests to a one-slot
// engine that reports no queue. The three that waited for the slot get
// their wait as an inferred queue (the first one got the slot at once),
// in the order they waited; with Ollama's native durations, every record
// leaves at most 10 % of its TTFT unattributed, where without the
// inference the waiters left 78-97 % (the engine reports only prefill).
// Over /v1, which reports nothing, the wait is taken out all the same.
func TestSerialEngineInferredQueue(t *testing.T) {
	for _, native := range []bool{true, false} {
		name := map[bool]string{true: "native", false: "v1"}[native]
		t.Run(name, func(t *testing.T) {
			e := newSerialEngine(native, 0)
			up := startUpstream(t, e.serve)
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.Engine = engines.KindGeneric })
			path, body := "/v1/chat/completions", chatBody
			if native {
				path, body = "/api/chat", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, _, err := postPath(t, addr, path, body, "X-Request-Id", fmt.Sprint("r", i)); err != nil {
						t.Errorf("request %d: %v", i, err)
					}
				}()
				<-e.arrived // the engine has it in line: the next one comes after it
			}
			wg.Wait()
			recs := map[string]gotRecord{}
			for range 4 {
				r := sink.next(t)
				recs[r.RequestID] = r
			}
			var lastQueue time.Duration
			for i := range 4 {
				r := recs[fmt.Sprint("r", i)]
				if !r.bd.OK {
					t.Fatalf("r%d: no breakdown (%s %s)", i, r.Reason, r.Detail)
				}
				q, _ := r.Timeline.Engine(stages.EngineQueue)
				inferred := r.Timeline.Inferred().Has(stages.EngineQueue)
				unattr, ttft := r.bd.Stages[stages.Unattributed], r.bd.TTFT
				t.Logf("r%d: ttft %v, engine queue %v (inferred %v), unattributed %v", i, ttft, q, inferred, unattr)
				if i > 0 {
					if !inferred || q <= lastQueue {
						t.Errorf("r%d: queue %v inferred %v; want one inferred, longer than r%d's %v", i, q, inferred, i-1, lastQueue)
					}
					lastQueue = q
				}
				limit := ttft / 10
				if !native {
					limit = ttft / 2 // the prefill is not reported: it stays unattributed
				}
				if i > 0 && unattr > limit || native && unattr > limit {
					t.Errorf("r%d: unattributed %v of TTFT %v", i, unattr, ttft)
				}
				if _, reported := r.Timeline.Engine(stages.EnginePrefill); reported != native {
					t.Errorf("r%d: prefill reported %v", i, reported)
				}
			}
		})
	}
}

// TestColdLoad: a request that found the model unloaded waits for its
// load, which Ollama's load_duration says; the record names it load, in
// the queue stage, not the queue itself.
func TestColdLoad(t *testing.T) {
	e := newSerialEngine(true, 150*time.Millisecond)
	up := startUpstream(t, e.serve)
	addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.Engine = engines.KindOllama })
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 2 {
		if _, got, err := postPath(t, addr, "/api/chat", body); err != nil || !strings.Contains(got, `"done":true`) {
			t.Fatalf("request %d: %v %q", i, err, got)
		}
		<-e.arrived
		r := sink.next(t)
		load, isLoad := r.Timeline.Engine(stages.EngineLoad)
		_, isRecv := r.Timeline.Engine(stages.EngineRecv)
		if cold := i == 0; isLoad != cold || isRecv == cold {
			t.Errorf("request %d: load %v (%v), recv %v; want a load only on the cold one", i, load, isLoad, isRecv)
		}
		if i == 0 && (load < e.load || r.bd.Parts[stages.EngineLoad] != load || r.bd.Stages[stages.Queue] < load) {
			t.Errorf("cold: load %v, carved %v, queue stage %v; want the load (>= %v) whole in queue",
				load, r.bd.Parts[stages.EngineLoad], r.bd.Stages[stages.Queue], e.load)
		}
		if r.Timeline.Inferred().Has(stages.EngineLoad) {
			t.Errorf("request %d: the load is reported, not inferred", i)
		}
		var bar time.Duration
		for _, g := range exporters.Segments(nil, &r.Record) {
			if g.Name == exporters.SegNameLoad {
				bar = g.Dur()
			}
		}
		if bar != r.bd.Parts[stages.EngineLoad] {
			t.Errorf("request %d: the waterfall's load bar %v, want the load %v", i, bar, r.bd.Parts[stages.EngineLoad])
		}
	}
}
