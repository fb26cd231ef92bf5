package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/gateway"
)

// TestAcceptedPolicies: the policies the gateway knows run, in order; one
// it refuses is skipped with the configuration's reason.
func TestAcceptedPolicies(t *testing.T) {
	ok, skipped := acceptedPolicies([]string{"no_such_policy", gateway.PolicyLeastLoad, gateway.PolicyLeastRequest})
	if want := []string{gateway.PolicyLeastLoad, gateway.PolicyLeastRequest}; !slices.Equal(ok, want) {
		t.Errorf("accepted %q, want %q", ok, want)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "`no_such_policy`: the gateway's configuration refuses it (") ||
		!strings.Contains(skipped[0], "policy") {
		t.Errorf("skipped %q", skipped)
	}
}
