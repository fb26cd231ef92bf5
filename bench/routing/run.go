package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/refengine/model"
	"github.com/ttftlens/ttftlens/stages"
)

// options are the benchmark's settings, from its flags.
type options struct {
	policies            []string
	duration, calibrate time.Duration
	// rate, when positive, is the arrival rate; otherwise load times the
	// capacity the calibration measures.
	rate, load float64
	seed       uint64
	// seeds is how many seeds run, from seed on: each the whole set.
	seeds       int
	maxRunning  int
	kvBlocks    int
	maxTokens   int
	warmup      int
	slowPrefill float64
	// slo is the TTFT SLO of the least_ttft run held to one (0:
	// defaultSLO).
	slo time.Duration
	// records, when set, is a directory each run writes its proxies'
	// records to as JSON lines (the log's), one file a run and replica
	// (recordsFile): what ttftlens replay reads.
	records string
	// replicas is how many proxies, each with its own gateway, share the
	// engines; the load is spread over them request by request.
	replicas int
	// share has the replicas share their least_ttft routing
	// (share_routing) through a redis-server the benchmark starts, at
	// redisAddr.
	share     bool
	redisAddr string
}

// recordsFile is the file of policy's run's records in dir (slo: the run
// held to an SLO), replica i's of n.
func recordsFile(dir, policy string, slo time.Duration, i, n int) string {
	if slo > 0 {
		policy += "-slo"
	}
	if n > 1 {
		policy += "-r" + strconv.Itoa(i+1)
	}
	return filepath.Join(dir, policy+".jsonl")
}

// sloShare is the share of the slow engine's TTFT p50 that the SLO run
// asks for when -slo does not say: below what the slow engine gives.
const sloShare = 0.75

// defaultSLO is the SLO run's when -slo does not say: sloShare of the slow
// engine's TTFT p50 under least_ttft, the policy the SLO holds (under
// another, the slow engine's queue can be many times what least_ttft lets
// it build), or under the first policy when least_ttft's run measured it
// none.
func defaultSLO(results []policyResult) time.Duration {
	p50 := func(r *policyResult) time.Duration { return r.engineP50[len(r.engineP50)-1] }
	from := &results[0]
	for i := range results {
		if results[i].policy == gateway.PolicyLeastTTFT && p50(&results[i]) > 0 {
			from = &results[i]
		}
	}
	return time.Duration(sloShare * float64(p50(from))).Round(time.Millisecond)
}

// engines are the three engines' configurations: alike, but for the last
// one's prefill, slowPrefill times as slow per token (its fault).
func (o *options) engines() []refengine.Config {
	base := refengine.Config{MaxRunning: o.maxRunning, KVBlocks: o.kvBlocks, TruthCapacity: 1 << 16}
	slow := base
	slow.Faults = "slow_prefill=" + strconv.FormatFloat(o.slowPrefill, 'g', -1, 64)
	return []refengine.Config{base, base, slow}
}

// engineLabels name the engines in the tables.
func (o *options) engineLabels() []string {
	return []string{"1", "2", "3 (prefill ×" + strconv.FormatFloat(o.slowPrefill, 'g', -1, 64) + ")"}
}

// policyResult is one policy's run.
type policyResult struct {
	policy string
	// requests were measured (warm-up left out); errors of them did not
	// end complete.
	requests, errors int
	// The client-measured TTFT of the complete ones.
	ttftP50, ttftP99 time.Duration
	// promptTokens and cachedTokens are the engines' own counts for the
	// measured requests: the prompt, and the part their prefix cache served;
	// ceilingTokens the most any routing could have had served
	// (cacheCeiling).
	promptTokens, cachedTokens, ceilingTokens int
	// split is how many records had the split; stageMedian is each stage's
	// median over them.
	split       int
	stageMedian [stages.NumStages]time.Duration
	// perEngine counts the records routed to each engine, engineP50 is
	// the proxy's TTFT p50 of those with a first token.
	perEngine []int
	engineP50 []time.Duration
	// predicted counts the records with a prediction and a first token;
	// errP50 and errP90 are their prediction error's percentiles:
	// |predicted − measured| / measured TTFT (the proxy's).
	predicted      int
	errP50, errP90 float64
	// stageErr is, per stage from queue on, the median of the prediction's
	// error in it over the same records: |predicted − measured| / measured
	// TTFT, a share of the whole.
	stageErr [stages.NumStages]float64
	// cache is, of the same records, those predicted with their prefix
	// cached or not (cached_tokens_expected > 0) against those whose
	// engine served most of the prompt from its cache or not: how many,
	// and their prediction error p50.
	cache [2][2]cacheCell
	// For a run held to a TTFT SLO (slo > 0): the requests refused for it,
	// and per engine, of those routed on a prediction, the ones served
	// later than the SLO and the latest, by how much over the SLO (a share
	// of it); of the rest, routed not on a prediction (none yet: a cold
	// model refuses nothing, and affinity chooses while no model predicts;
	// or a probe past the SLO, of models measured long ago), how many, and
	// how many came later than the SLO.
	slo               time.Duration
	refused           int
	sloMissed         []int
	worstMiss         []float64
	unpredicted       []int
	unpredictedMissed []int
}

// hitShare is the cached share of the prompt tokens (0 when none).
func (r *policyResult) hitShare() float64 { return share(r.cachedTokens, r.promptTokens) }

// hitCeiling is the most of the prompt tokens any routing could have had
// cached (0 when none): cacheCeiling over them.
func (r *policyResult) hitCeiling() float64 { return share(r.ceilingTokens, r.promptTokens) }

// share is n over of (0 when of is).
func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// calibrateRate measures the engines' capacity: a closed loop with a
// client for every running slot and one more for each engine, so that a
// request always waits, under least_request, for o.calibrate; the
// requests still in flight at its end are cancelled. The capacity is the
// completions of its last two thirds.
func calibrateRate(ctx context.Context, o *options, ps []bench.Prompt) (capacityPerS float64, clients int, err error) {
	st, err := startStack(gateway.PolicyLeastRequest, 0, o.engines(), nil, "")
	if err != nil {
		return 0, 0, err
	}
	defer st.close()
	clients = len(st.engines) * (o.maxRunning + 1)
	cctx, cancel := context.WithTimeout(ctx, o.calibrate)
	defer cancel()
	cfg := bench.Config{URL: st.url(), Concurrency: clients, Duration: o.calibrate,
		Prompts: ps, IgnoreEOS: true, OutputTokens: bench.Dist{Min: o.maxTokens, Max: o.maxTokens}, Seed: o.seed}
	run, err := cfg.Run(cctx)
	if err != nil {
		return 0, 0, err
	}
	c, err := capacity(run, o.calibrate/3, o.calibrate)
	if err != nil {
		err = fmt.Errorf("%w (a longer -calibrate, or -rate)", err)
	}
	return c, clients, err
}

// runPolicy runs the workload (the prompts pt.ps) at rate through fresh
// engines and a proxy under the policy, its route held to slo (0: none).
func runPolicy(ctx context.Context, o *options, policy string, slo time.Duration, rate float64, pt *promptTokens) (policyResult, error) {
	ps := pt.ps
	logs := make([]io.Writer, max(o.replicas, 1))
	if o.records != "" {
		for i := range logs {
			f, err := os.Create(recordsFile(o.records, policy, slo, i, len(logs)))
			if err != nil {
				return policyResult{}, err
			}
			defer f.Close()
			logs[i] = f
		}
	}
	st, err := startStack(policy, slo, o.engines(), logs, o.redisAddr)
	if err != nil {
		return policyResult{}, err
	}
	defer st.close()
	cfg := bench.Config{URL: st.url(), Transport: st.transport(), Rate: rate, Duration: o.duration, Warmup: o.warmup, Timeout: 2 * time.Minute,
		Prompts: ps, IgnoreEOS: true, OutputTokens: bench.Dist{Min: o.maxTokens, Max: o.maxTokens}, Seed: o.seed}
	run, err := cfg.Run(ctx)
	if err != nil {
		return policyResult{}, err
	}
	// Every request has its record once the proxy has shut down.
	if err := st.shutdownProxy(); err != nil {
		return policyResult{}, fmt.Errorf("%s: proxy shutdown: %w", policy, err)
	}
	res := summarize(policy, slo, run, st)
	if res.ceilingTokens, err = cacheCeiling(run, st.truth, func(seq int) ([]int, error) { return pt.of(st.engines[0], seq) }); err != nil {
		return policyResult{}, err
	}
	return res, nil
}

// promptTokens are the workload's prompts ps and, once asked for, their
// tokens as the engines compute them, by index in ps.
type promptTokens struct {
	ps   []bench.Prompt
	toks map[int][]int
}

// of returns the tokens of request seq's prompt (ps[seq mod len]), as e
// computes them.
func (pt *promptTokens) of(e *refengine.Server, seq int) ([]int, error) {
	i := seq % len(pt.ps)
	if t, ok := pt.toks[i]; ok {
		return t, nil
	}
	t, err := e.ChatPromptTokens(pt.ps[i].Messages)
	if err != nil {
		return nil, fmt.Errorf("prompt %d: %w", i, err)
	}
	if pt.toks == nil {
		pt.toks = make(map[int][]int)
	}
	pt.toks[i] = t
	return t, nil
}

// cacheCeiling is the most of the measured requests' prompt tokens (those
// promptTokens counts) that any routing could have had served from the
// engines' prefix caches: each the full blocks its prompt shares with the
// prompt of a request before it in the run (by Seq, of those that reached
// an engine), what one cache that evicted nothing, and had every earlier
// prompt computed by then, would serve (the engines match a prefix in
// full blocks, and leave a prompt's last token to compute). tokens(seq) is
// request seq's prompt as the engines compute it; truth the engines'
// account of a request (stack.truth).
func cacheCeiling(run *bench.Run, truth func(id string) (prompt, cached int, ok bool), tokens func(seq int) ([]int, error)) (int, error) {
	order := make([]*bench.Result, 0, len(run.Results))
	for i := range run.Results {
		if _, _, ok := truth(run.Results[i].ID); ok {
			order = append(order, &run.Results[i])
		}
	}
	slices.SortFunc(order, func(a, b *bench.Result) int { return a.Seq - b.Seq })
	seen := make(map[uint64]bool) // the chain of every full block computed before (the engine's cache key)
	n := 0
	for _, r := range order {
		toks, err := tokens(r.Seq)
		if err != nil {
			return 0, err
		}
		var chain uint64
		shared := true
		for b := 0; (b+1)*model.BlockSize <= len(toks); b++ {
			chain = model.ChainHash(chain, toks[b*model.BlockSize:(b+1)*model.BlockSize])
			shared = shared && (b+1)*model.BlockSize < len(toks) && seen[chain]
			if shared && !r.Warmup {
				n += model.BlockSize
			}
			seen[chain] = true
		}
	}
	return n, nil
}

// summarize reads a run's measured requests with their records and the
// engines' truth.
func summarize(policy string, slo time.Duration, run *bench.Run, st *stack) policyResult {
	n := len(st.hosts)
	res := policyResult{policy: policy, slo: slo, perEngine: make([]int, n), engineP50: make([]time.Duration, n),
		sloMissed: make([]int, n), worstMiss: make([]float64, n), unpredicted: make([]int, n), unpredictedMissed: make([]int, n)}
	var ttft []time.Duration
	var byStage [stages.NumStages][]time.Duration
	byEngine := make([][]time.Duration, n)
	var errs []float64
	var stageErrs [stages.NumStages][]float64
	var cacheErrs [2][2][]float64
	for i := range run.Results {
		r := &run.Results[i]
		if r.Warmup {
			continue
		}
		res.requests++
		if !r.OK() || !r.HasTTFT {
			res.errors++
		} else {
			ttft = append(ttft, r.TTFT)
		}
		p, c, truth := st.truth(r.ID)
		if truth {
			res.promptTokens += p
			res.cachedTokens += c
		}
		f, ok := st.recs.get(r.ID)
		if !ok {
			continue
		}
		if f.refused {
			res.refused++
		}
		e := st.engineOf(f.upstream)
		if e >= 0 {
			res.perEngine[e]++
		}
		if !f.ok {
			continue
		}
		res.split++
		for s := range byStage {
			byStage[s] = append(byStage[s], f.stages[s])
		}
		if f.predicted && f.ttft > 0 && (slo <= 0 || !f.probe) { // a held run's probes were sent past their prediction
			err := math.Abs(float64(f.prediction-f.ttft)) / float64(f.ttft)
			errs = append(errs, err)
			if truth {
				hit, expected := b2i(c*2 >= p), b2i(f.cachedExpected > 0)
				cacheErrs[expected][hit] = append(cacheErrs[expected][hit], err)
			}
			for s := stages.Queue; s < stages.NumStages; s++ {
				stageErrs[s] = append(stageErrs[s], math.Abs(float64(f.predStages[s]-f.stages[s]))/float64(f.ttft))
			}
		}
		if e < 0 {
			continue
		}
		byEngine[e] = append(byEngine[e], f.ttft)
		late := slo > 0 && f.ttft > slo
		switch {
		case slo > 0 && (!f.predicted || f.probe):
			res.unpredicted[e]++
			if late {
				res.unpredictedMissed[e]++
			}
		case late:
			res.sloMissed[e]++
			res.worstMiss[e] = max(res.worstMiss[e], float64(f.ttft-slo)/float64(slo))
		}
	}
	slices.Sort(ttft)
	res.ttftP50, res.ttftP99 = bench.Percentile(ttft, 0.50), bench.Percentile(ttft, 0.99)
	for s := range byStage {
		slices.Sort(byStage[s])
		res.stageMedian[s] = bench.Percentile(byStage[s], 0.50)
	}
	for e, d := range byEngine {
		slices.Sort(d)
		res.engineP50[e] = bench.Percentile(d, 0.50)
	}
	if res.predicted = len(errs); len(errs) > 0 {
		slices.Sort(errs)
		res.errP50, res.errP90 = errs[len(errs)/2], errs[min(len(errs)*9/10, len(errs)-1)]
		for s := stages.Queue; s < stages.NumStages; s++ {
			slices.Sort(stageErrs[s])
			res.stageErr[s] = stageErrs[s][len(stageErrs[s])/2]
		}
	}
	for i := range cacheErrs {
		for j, e := range cacheErrs[i] {
			slices.Sort(e)
			res.cache[i][j] = cacheCell{n: len(e)}
			if len(e) > 0 {
				res.cache[i][j].errP50 = e[len(e)/2]
			}
		}
	}
	return res
}

// cacheCell is how many predictions, and their error p50.
type cacheCell struct {
	n      int
	errP50 float64
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
