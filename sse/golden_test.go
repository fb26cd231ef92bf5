package sse_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current parser")

// TestGolden parses each testdata/*.sse in one pass and compares the blocks, one
// JSON object per line, with testdata/*.golden. Run with -update to rewrite them.
// The same blocks must come out one byte per read, split into two reads at every
// position, and from the naive oracle.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.sse"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, path := range inputs {
		name := strings.TrimSuffix(filepath.Base(path), ".sse")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got := jsonLines(normalize(collect(t, bytes.NewReader(in), 0)))
			golden := strings.TrimSuffix(path, ".sse") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if d := firstDiff(got, string(want)); d != "" {
				t.Fatalf("%s differs from golden at %s", path, d)
			}
			if d := firstDiff(jsonLines(oracle(in, 0)), got); d != "" {
				t.Errorf("oracle differs at %s", d)
			}
			if d := firstDiff(jsonLines(normalize(collect(t, iotest.OneByteReader(bytes.NewReader(in)), 0))), got); d != "" {
				t.Errorf("one byte per read differs at %s", d)
			}
			for at := 0; at <= len(in); at++ {
				if d := firstDiff(jsonLines(normalize(collect(t, splitReader(in, at), 0))), got); d != "" {
					t.Fatalf("split at %d differs at %s", at, d)
				}
			}
			// Raw bytes are preserved.
			var raw strings.Builder
			for _, line := range normalize(collect(t, bytes.NewReader(in), 0)) {
				raw.WriteString(line.Raw)
			}
			if raw.String() != string(in) {
				t.Errorf("concatenated Raw differs from the input")
			}
		})
	}
}
