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
