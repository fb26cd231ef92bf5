package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// TestCheckPolicies: the four policies run; a misspelt one is an error
// naming it, not a policy quietly left out.
func TestCheckPolicies(t *testing.T) {
	if err := checkPolicies([]string{gateway.PolicyRoundRobin, gateway.PolicyLeastRequest, gateway.PolicyLeastLoad, gateway.PolicyLeastTTFT}); err != nil {
		t.Fatal(err)
	}
	if err := checkPolicies([]string{gateway.PolicyLeastLoad, "least_ttfb"}); err == nil || !strings.Contains(err.Error(), `"least_ttfb"`) {
		t.Fatalf("a misspelt policy: %v", err)
	}
}

// TestPoolConfigSLO: the route is held to the SLO given, and to none at 0.
func TestPoolConfigSLO(t *testing.T) {
	for _, slo := range []time.Duration{0, 850 * time.Millisecond} {
		cfg, err := poolConfig(gateway.PolicyLeastTTFT, slo, []string{"http://127.0.0.1:1"})
		if err != nil || cfg.Routes[0].TTFTSLO != slo {
			t.Fatalf("slo %v: %v, %+v", slo, err, cfg)
		}
	}
}

// TestReplicasSpreadTheLoad: with -replicas, the requests go to each
// replica in turn, and each writes its own records; and the prompts'
// tokens the cache ceiling reads are the engines'.
func TestReplicasSpreadTheLoad(t *testing.T) {
	engines := smallEngines()
	logs := []*bytes.Buffer{{}, {}}
	st, err := startStack(gateway.PolicyLeastTTFT, 0, engines, []io.Writer{logs[0], logs[1]}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	tok := model.DefaultTokenizer(model.DefaultConfig())
	systems, _ := systemPrompts(tok, 1)
	pt := promptTokens{ps: prompts(systems, requests(1, 10))}
	cfg := bench.Config{URL: st.url(), Transport: st.transport(), Requests: 10, Concurrency: 1, Timeout: time.Minute,
		Prompts: pt.ps, OutputTokens: bench.Dist{Min: 2, Max: 2}, Seed: 1}
	run, err := cfg.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.shutdownProxy(); err != nil {
		t.Fatal(err)
	}
	for i, l := range logs {
		if recs, _, err := bench.ReadLog(l); err != nil || len(recs) != 5 {
			t.Errorf("replica %d: %d records (%v), want 5 of the 10", i, len(recs), err)
		}
	}
	// The prompts' tokens the ceiling reads are the engines': as many, and
	// the ceiling no less than what the engines served.
	cached := 0
	for _, r := range run.Results {
		p, c, ok := st.truth(r.ID)
		toks, err := pt.of(st.engines[0], r.Seq)
		if !ok || err != nil || len(toks) != p {
			t.Fatalf("request %d: %d tokens (%v), the engine computed %d (%v)", r.Seq, len(toks), err, p, ok)
		}
		cached += c
	}
	if n, err := cacheCeiling(run, st.truth, func(seq int) ([]int, error) { return pt.of(st.engines[0], seq) }); n < cached || err != nil {
		t.Errorf("cacheCeiling = %d (%v), below the %d tokens the engines served from cache", n, err, cached)
	}
}

// TestSummarizeHeld: in a run held to an SLO, a request routed on its
// prediction and served late counts as past the SLO, by how much; one
// routed not on a prediction (none, or a probe sent past it) counts
// apart, and a probe's prediction is left out of the error figures the
// SLO target reads (it was sent past it).
func TestSummarizeHeld(t *testing.T) {
	const slo = 100 * time.Millisecond
	st := &stack{hosts: []string{"e1", "e2"}, recs: &recordSink{m: map[string]recordFacts{
		"on-time": {upstream: "e1", ok: true, ttft: 90 * time.Millisecond, predicted: true, prediction: 90 * time.Millisecond},
		"late":    {upstream: "e1", ok: true, ttft: 120 * time.Millisecond, predicted: true, prediction: 80 * time.Millisecond},
		"cold":    {upstream: "e2", ok: true, ttft: 300 * time.Millisecond},
		"past":    {upstream: "e2", ok: true, ttft: 80 * time.Millisecond, predicted: true, prediction: 2 * time.Second, probe: true},
		"refused": {refused: true},
	}}}
	run := &bench.Run{}
	for _, id := range []string{"on-time", "late", "cold", "past", "refused"} {
		f := st.recs.m[id]
		run.Results = append(run.Results, bench.Result{ID: id, End: "done", HasTTFT: f.ok, TTFT: f.ttft})
	}
	res := summarize("least_ttft", slo, run, st)
	if res.refused != 1 || res.sloMissed[0] != 1 || res.sloMissed[1] != 0 || res.unpredicted[0] != 0 || res.unpredicted[1] != 2 || res.unpredictedMissed[1] != 1 {
		t.Fatalf("refused %d, past the SLO %v, not on a prediction %v (past it %v); want 1, [1 0], [0 2] ([0 1])", res.refused, res.sloMissed, res.unpredicted, res.unpredictedMissed)
	}
	if res.worstMiss[0] != 0.2 {
		t.Fatalf("the latest past the SLO by %v; want 0.2", res.worstMiss[0])
	}
	if res.predicted != 2 || res.errP90 != 1.0/3 {
		t.Fatalf("%d predicted, error p90 %v; want the two routed on a prediction, 1/3 (the probe's 24 left out)", res.predicted, res.errP90)
	}
}

// TestCacheCeiling: a measured request counts the full blocks its prompt
// shares with the prompt of a request before it (by Seq, whatever order
// the results ended in) that reached an engine, less a block that would
// hold its last token; the warm-up's prompts count as computed.
func TestCacheCeiling(t *testing.T) {
	seqOf := func(base, n int) []int { // n tokens counting up from base
		s := make([]int, n)
		for i := range s {
			s[i] = base + i
		}
		return s
	}
	a := seqOf(0, 40)                            // two full blocks and 8 tokens
	b := append(seqOf(0, 32), seqOf(1000, 8)...) // a's two blocks, another tail
	prompts := map[int][]int{
		0: a,               // the warm-up's: counts nothing, computed
		1: b,               // shares a's two blocks: 32
		2: a,               // 32
		3: seqOf(5000, 40), // nothing shared: 0
		4: seqOf(0, 32),    // a's two blocks, but its last token in the second: 16
		5: seqOf(9000, 40), // never reached an engine: not counted, not computed
		6: seqOf(9000, 40), // shares only with 5: 0
	}
	run := &bench.Run{}
	for _, seq := range []int{2, 0, 4, 1, 6, 3, 5} {
		run.Results = append(run.Results, bench.Result{ID: strconv.Itoa(seq), Seq: seq, Warmup: seq == 0})
	}
	truth := func(id string) (int, int, bool) { return 0, 0, id != "5" }
	tokens := func(seq int) ([]int, error) { return prompts[seq], nil }
	if got, err := cacheCeiling(run, truth, tokens); got != 32+32+16 || err != nil {
		t.Errorf("cacheCeiling = %d, %v; want %d", got, err, 32+32+16)
	}
	boom := errors.New("boom")
	if _, err := cacheCeiling(run, truth, func(int) ([]int, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("a prompt that could not be tokenized: %v", err)
	}
}
