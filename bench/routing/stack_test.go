package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
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
