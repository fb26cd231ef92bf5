package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAliasExpansionBounded: aliases repeating a list inside a list cannot
// make a small file expand into millions of values: decoding stops at the
// value budget with an error (3000 × 3000 would be 9 million values).
func TestAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("u: &u [")
	for i := range 3000 {
		fmt.Fprintf(&b, "http://h%d,", i)
	}
	b.WriteString("]\npools: [")
	for range 3000 {
		b.WriteString("{upstreams: *u},")
	}
	b.WriteString("]\n")
	_, err := Parse([]byte(b.String()), "bomb.yaml")
	if err == nil || !strings.Contains(err.Error(), "too many values after expanding aliases") {
		t.Fatalf("err = %v", err)
	}
}

// TestAliasesWork: an anchor shared by two keys is fine.
func TestAliasesWork(t *testing.T) {
	c, err := Parse([]byte(`
keys:
  - name: a
    key: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    quota: &q {requests: 10, interval: 1s}
  - name: b
    key: sha256:8f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    quota: *q
pools: [{name: p, upstreams: ["http://a"]}]
routes: [{model: m, pool: p}]
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Keys[1].Quota.Requests != 10 || c.Keys[1].Quota == c.Keys[0].Quota {
		t.Fatalf("%+v", c.Keys[1].Quota)
	}
}

// TestParseLargeConfig: a 10,000-key, 100-route file parses (within the
// alias budget) in reasonable time.
func TestParseLargeConfig(t *testing.T) {
	var b strings.Builder
	b.WriteString("keys:\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "  - {name: k%d, key: %q}\n", i, HashKey(testKey(i)))
	}
	b.WriteString("pools: [{name: p, upstreams: [http://a]}]\nroutes:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "  - {model: m%d, pool: p, max_tokens: 4096}\n", i)
	}
	start := time.Now()
	c, err := Parse([]byte(b.String()), "big.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Keys) != 10000 || len(c.Routes) != 100 {
		t.Fatal("lost entries")
	}
	t.Logf("%d bytes parsed in %v", b.Len(), time.Since(start))
}
