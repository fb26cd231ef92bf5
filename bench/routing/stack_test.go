package main

import (
	"bytes"
	"context"
	"io"
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
// replica in turn, and each writes its own records.
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
	cfg := bench.Config{URL: st.url(), Transport: st.transport(), Requests: 10, Concurrency: 1, Timeout: time.Minute,
		Prompts: prompts(systems, requests(1, 10)), OutputTokens: bench.Dist{Min: 2, Max: 2}, Seed: 1}
	if _, err := cfg.Run(context.Background()); err != nil {
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

// TestCacheCeiling: every measured request with the engines' account but
// the first of its system prompt counts the most any request of that
// prompt was served from cache, whatever it was served itself; the first
// is known by its number, not by when it ended.
func TestCacheCeiling(t *testing.T) {
	systems := []int{0, 1, 0, 1} // prompt seq mod 4's system prompt
	cached := map[string]int{"w0": 0, "a1": 0, "a2": 960, "a3": 0, "a5": 1100, "a6": 900, "a7": 1000}
	run := &bench.Run{Results: []bench.Result{
		{ID: "a2", Seq: 2},               // system 0: 960, the most of system 0
		{ID: "w0", Seq: 0, Warmup: true}, // system 0's first, not measured
		{ID: "a3", Seq: 3},               // system 1: evicted, counts 1100
		{ID: "a1", Seq: 1},               // system 1's first: counts nothing
		{ID: "a4", Seq: 4},               // system 0, no account (never sent): not counted
		{ID: "a6", Seq: 6},               // system 0: 900, counts 960
		{ID: "a5", Seq: 5},               // system 1: 1100
		{ID: "a7", Seq: 7},               // system 1: 1000, counts 1100
	}}
	truth := func(id string) (int, int, bool) {
		c, ok := cached[id]
		return 1200, c, ok
	}
	if got, want := cacheCeiling(run, truth, systems), 960+1100+960+1100+1100; got != want {
		t.Errorf("cacheCeiling = %d, want %d", got, want)
	}
	if got := cacheCeiling(run, truth, nil); got != 0 {
		t.Errorf("cacheCeiling without systems = %d, want 0", got)
	}
}
