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
