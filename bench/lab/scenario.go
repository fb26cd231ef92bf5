package lab

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

// Scenario is one cause of a slow first token: a baseline run and a run
// with the cause injected, on otherwise identical stacks and load.
type Scenario struct {
	Name string
	// Cause says in a few words what is injected.
	Cause string
	// Engine is the engine of both runs; InjectedEngine, when set,
	// replaces it for the injected run (a server-side cause).
	Engine         refengine.Config
	InjectedEngine *refengine.Config
	// Load is the probe's load for both runs (URL and Admin are filled in).
	Load bench.Config
	// Fault is sent as X-Ttftlens-Fault on every injected request.
	Fault string
	// Downstream puts a BufferingProxy between the probe and ttftlens in
	// the injected run.
	Downstream bool
	// Expect is the part the diagnosis must name; ExpectEngine, when set,
	// the engine duration inside it that must carry the growth (tokenize,
	// media, sync).
	Expect       bench.Part
	ExpectEngine string
	// Unsplit says the injected cause leaves time the engine cannot report
	// (so unattributed is expected to grow); Buffered that the records
	// must be flagged as buffered upstream.
	Unsplit, Buffered bool
	// Note is printed with the diagnosis.
	Note string
}

func load(c, n, maxTokens int) bench.Config {
	return bench.Config{
		Concurrency: c, Requests: n, Warmup: 1, IgnoreEOS: true,
		PromptTokens: bench.Dist{Min: 8, Max: 8}, OutputTokens: bench.Dist{Min: maxTokens, Max: maxTokens},
	}
}

// Scenarios are the six causes of a slow first token: a queue, a slow media
// fetch, a slow tokenizer, a long prefill, a slow tensor-parallel rank and
// buffering (both upstream and downstream of the proxy), sized to take a
// few seconds each.
func Scenarios() []Scenario {
	return []Scenario{
		{
			Name: "queue", Cause: "the engine runs one sequence at a time (--max-running 1) under 4 concurrent clients",
			InjectedEngine: &refengine.Config{MaxRunning: 1},
			Load:           load(4, 12, 12), Expect: bench.Part(stages.Queue),
		},
		{
			Name: "slow_media", Cause: "each request's media fetch takes 80 ms longer (slow_media=80ms)",
			Load: load(1, 9, 8), Fault: "slow_media=80ms", Expect: bench.Part(stages.Preparation), ExpectEngine: "media",
		},
		{
			Name: "slow_tokenizer", Cause: "one tokenizer worker, each job 50 ms slower (slow_tokenizer=50ms), 2 concurrent clients",
			Engine: refengine.Config{TokenizerWorkers: 1},
			Load:   load(2, 8, 8), Fault: "slow_tokenizer=50ms", Expect: bench.Part(stages.Preparation), ExpectEngine: "tokenize",
		},
		{
			Name: "long_prefill", Cause: "250 extra prompt tokens (long_prompt=250)",
			Load: load(1, 9, 8), Fault: "long_prompt=250", Expect: bench.Part(stages.Prefill),
		},
		{
			Name: "slow_rank", Cause: "two tensor-parallel ranks, rank 1 sleeps 12 ms per layer (straggler=1:12ms)",
			Engine: refengine.Config{Ranks: 2},
			Load:   load(1, 5, 8), Fault: "straggler=1:12ms", Expect: bench.Part(stages.Prefill), ExpectEngine: "sync",
		},
		{
			Name: "buffered_upstream", Cause: "the engine holds every event until the end of the generation (buffered)",
			// 64 tokens, as buffered_downstream's and for its reason: the
			// held generation adds about 50 ms, past a slow moment of the
			// client's side (24 added about 20 ms).
			Load: load(1, 5, 64), Fault: "buffered", Expect: bench.Part(stages.Unattributed), Unsplit: true, Buffered: true,
			Note: "the engine's timing comment is held back with the tokens, so the engine's stages stay as they were; " +
				"the first token waited for the whole generation, which the proxy sees only as upstream time it cannot attribute, " +
				"and the arrival pattern flags the stream as buffered",
		},
		{
			Name: "buffered_downstream", Cause: "a reverse proxy between the client and ttftlens holds each response whole",
			// 64 tokens: the held response adds about 100 ms, well past a
			// slow moment of the client's side in the baseline (24 added
			// 29 to 57 ms, and once only 2.4 ms beside a baseline whose outside
			// was 17 ms: the share fell to 69 %).
			Load: load(1, 5, 64), Downstream: true, Expect: bench.Outside,
			Note: "ttftlens flushed the first token on time: the wait is outside it, between its socket and the client",
		},
	}
}

// Lookup returns the scenario with the name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Diagnosis compares a scenario's injected run with its baseline.
type Diagnosis struct {
	Scenario           Scenario
	Baseline, Injected bench.Summary
	// Added is the growth of the median client TTFT.
	Added time.Duration
	// Deltas is each part's median growth; Dominant the part that grew
	// most, and Share its growth over Added.
	Deltas   [bench.NumParts]time.Duration
	Dominant bench.Part
	Share    float64
	// WindowDelta is the growth of the median upstream window as the
	// proxy's clock measured it (bench.Breakdown.MedianWindow).
	WindowDelta time.Duration
	// EngineDeltas is the growth of each engine duration's median.
	EngineDeltas map[string]time.Duration
	// Unattributed is the injected run's median unattributed time over its
	// median client TTFT.
	Unattributed float64
	// Inconsistent is how many injected requests' engine reports did not
	// fit the upstream window the proxy timed.
	Inconsistent int
	// Buffered is how many injected requests the proxy flagged as buffered
	// upstream, of Joined.
	Buffered, Joined int
	// Buffering lists the signs seen on the injected requests.
	Buffering []string
}

// Run runs the baseline and the injected run and diagnoses the difference.
func (s Scenario) Run(ctx context.Context) (*Diagnosis, error) {
	base, _, err := s.runOnce(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("%s baseline: %w", s.Name, err)
	}
	inj, flags, err := s.runOnce(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%s injected: %w", s.Name, err)
	}
	d := &Diagnosis{Scenario: s, Baseline: bench.Summarize(base), Injected: bench.Summarize(inj), EngineDeltas: map[string]time.Duration{}}
	bb, ib := d.Baseline.Breakdown, d.Injected.Breakdown
	if bb == nil || ib == nil {
		return nil, fmt.Errorf("%s: no joined request with a first token (baseline %d joined, injected %d joined; %s)",
			s.Name, d.Baseline.Joined, d.Injected.Joined, d.Injected.JoinNote)
	}
	d.Added = ib.MedianClientTTFT - bb.MedianClientTTFT
	d.WindowDelta = ib.MedianWindow - bb.MedianWindow
	for p := range bench.NumParts {
		d.Deltas[p] = ib.Median[p] - bb.Median[p]
		if d.Deltas[p] > d.Deltas[d.Dominant] {
			d.Dominant = bench.Part(p)
		}
	}
	if d.Added > 0 {
		d.Share = float64(d.Deltas[d.Dominant]) / float64(d.Added)
	}
	for k, v := range ib.MedianEngine {
		d.EngineDeltas[k] = v - bb.MedianEngine[k]
	}
	if ib.MedianClientTTFT > 0 {
		d.Unattributed = float64(ib.Median[stages.Unattributed]) / float64(ib.MedianClientTTFT)
	}
	kinds := map[string]bool{}
	for _, r := range inj.Results {
		if r.Warmup || r.Record == nil {
			continue
		}
		d.Joined++
		if r.Record.Inconsistent {
			d.Inconsistent++
		}
		if b := flags[r.ID]; b != 0 {
			d.Buffered++
			for _, k := range b.Kinds() {
				kinds[k] = true
			}
		}
	}
	for k := range kinds {
		d.Buffering = append(d.Buffering, k)
	}
	slices.Sort(d.Buffering)
	return d, nil
}

// runOnce runs one side on a fresh stack and returns the run and the
// buffering signs the proxy recorded, by request id.
func (s Scenario) runOnce(ctx context.Context, injected bool) (*bench.Run, map[string]record.Buffering, error) {
	ecfg := s.Engine
	if injected && s.InjectedEngine != nil {
		ecfg = *s.InjectedEngine
	}
	st, err := Start(StackConfig{Engine: ecfg})
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	cfg := s.Load
	cfg.URL, cfg.Admin = st.URL, st.Admin
	if injected && s.Fault != "" {
		cfg.Header = http.Header{"X-Ttftlens-Fault": {s.Fault}}
	}
	if injected && s.Downstream {
		bp, err := StartBufferingProxy(st.URL)
		if err != nil {
			return nil, nil, err
		}
		defer bp.Close()
		cfg.URL = bp.URL
	}
	run, err := cfg.Run(ctx)
	if err != nil {
		return nil, nil, err
	}
	flags := map[string]record.Buffering{}
	for i := range run.Results {
		r := &run.Results[i]
		b := st.Buffering(r.ID)
		if b == 0 {
			continue
		}
		flags[r.ID] = b
		if r.Record != nil && len(r.Record.Buffering) == 0 {
			r.Record.Buffering = b.Kinds()
		}
	}
	return run, flags, nil
}

// EndCase is one end reason (package endreason) produced on demand.
type EndCase struct {
	Name string
	// Fault is sent as X-Ttftlens-Fault.
	Fault string
	// Proxy adjusts the proxy (e.g. a first-token deadline).
	Proxy func(*proxy.Config)
	// Timeout is the client's own time limit (for client_cancel).
	Timeout time.Duration
	// MaxTokens is sent as max_tokens.
	MaxTokens        int
	Reason, Detail   string
	ClientEnd, Cause string
}

// EndCases are the end reasons the proof and the demos produce.
func EndCases() []EndCase {
	return []EndCase{
		{Name: "length", MaxTokens: 8, Reason: "length", Detail: "finish_length", ClientEnd: "done",
			Cause: "the generation ran out of max_tokens"},
		{Name: "policy_block", Fault: "content_filter=2", MaxTokens: 8, Reason: "policy_block", Detail: "content_filter", ClientEnd: "done",
			Cause: "the engine's content filter stopped the answer after 2 tokens (content_filter=2)"},
		{Name: "client_cancel", Fault: "queue_delay=400ms", Timeout: 150 * time.Millisecond, MaxTokens: 8,
			Reason: "client_cancel", Detail: "client_closed", ClientEnd: "timeout",
			Cause: "the client gave up after 150 ms while the request waited 400 ms in the engine's queue"},
		{Name: "deadline", Fault: "queue_delay=400ms", MaxTokens: 8,
			Proxy:  func(c *proxy.Config) { c.FirstTokenTimeout = 150 * time.Millisecond },
			Reason: "deadline", Detail: "ttft_deadline", ClientEnd: "http_504",
			Cause: "the proxy's first-token deadline (150 ms) fired while the request waited 400 ms in the engine's queue"},
		{Name: "worker_failure", Fault: "http_error=503", MaxTokens: 8, Reason: "worker_failure", Detail: "upstream_5xx", ClientEnd: "http_503",
			Cause: "the engine answered 503 (http_error=503)"},
		{Name: "upstream_disconnect", Fault: "reset_after=2", MaxTokens: 8, Reason: "upstream_disconnect", Detail: "reset_mid_stream", ClientEnd: "cut",
			Cause: "the engine reset the connection after 2 tokens (reset_after=2)"},
		{Name: "upstream_truncated", Fault: "close_after=2", MaxTokens: 8, Reason: "upstream_disconnect", Detail: "eof_without_done", ClientEnd: "cut",
			Cause: "the engine ended the stream after 2 tokens without a finish or [DONE] (close_after=2)"},
	}
}

// LookupEnd returns the end case with the name.
func LookupEnd(name string) (EndCase, bool) {
	for _, c := range EndCases() {
		if c.Name == name {
			return c, true
		}
	}
	return EndCase{}, false
}

// Run sends n requests of the case through a fresh stack and returns them
// with their joined records.
func (c EndCase) Run(ctx context.Context, n int) (*bench.Run, error) {
	st, err := Start(StackConfig{Proxy: c.Proxy})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	cfg := load(1, n, c.MaxTokens)
	cfg.Warmup = 0
	cfg.URL, cfg.Admin, cfg.Timeout = st.URL, st.Admin, c.Timeout
	if c.Fault != "" {
		cfg.Header = http.Header{"X-Ttftlens-Fault": {c.Fault}}
	}
	return cfg.Run(ctx)
}
