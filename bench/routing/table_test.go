package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/stages"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current tables")

// result is a policy's run with the given TTFT and stage medians (ms).
func result(policy string, p50, p99 time.Duration, cached int, queue, prefill time.Duration, perEngine ...int) policyResult {
	r := policyResult{policy: policy, requests: 400, errors: 2, ttftP50: p50, ttftP99: p99,
		promptTokens: 400 * 1480, cachedTokens: cached, split: 398, perEngine: perEngine}
	r.stageMedian[stages.Gateway] = 40 * time.Microsecond
	r.stageMedian[stages.Queue] = queue
	r.stageMedian[stages.Prefill] = prefill
	r.stageMedian[stages.FirstDecode] = 9 * time.Millisecond
	r.stageMedian[stages.Transport] = 310 * time.Microsecond
	return r
}

func baseReport() report {
	return report{
		heading:      "2026-12-05: `go run ./bench/routing -duration 90s`, go1.26.8, 2 CPUs",
		engines:      "Three reference engines in one process (max-running 4, 768 KV blocks each; engine 3 with slow_prefill=2) behind ttftlens as one pool",
		labels:       []string{"1", "2", "3 (prefill ×2)"},
		systemTokens: []int{1000, 1128, 1257, 1385, 1514, 1642, 1771, 1900},
		rate:         4.2, capacity: 4.667, load: 0.9, clients: 15, calibrate: 15 * time.Second, duration: 90 * time.Second, seed: 1,
	}
}

func TestReport(t *testing.T) {
	tests := []struct {
		golden string
		edit   func(r *report)
	}{
		{"two-policies", func(r *report) {
			r.results = []policyResult{
				result("least_request", 812*time.Millisecond, 4210*time.Millisecond, 400*460, 640*time.Millisecond, 180*time.Millisecond, 134, 133, 131),
				result("least_load", 655*time.Millisecond, 2980*time.Millisecond, 400*455, 470*time.Millisecond, 175*time.Millisecond, 150, 148, 100),
			}
		}},
		{"with-least-ttft", func(r *report) {
			r.rate, r.capacity = 5, 0 // given with -rate
			ttft := result("least_ttft", 210*time.Millisecond, 1450*time.Millisecond, 400*1320, 150*time.Millisecond, 12*time.Millisecond, 170, 160, 68)
			ttft.predicted, ttft.errP50, ttft.errP90 = 390, 0.12, 0.31
			ttft.stageErr[stages.Queue], ttft.stageErr[stages.Prefill], ttft.stageErr[stages.Transport] = 0.083, 0.021, 0.0004
			ttft.cache = [2][2]cacheCell{{{n: 40, errP50: 0.2}, {n: 3, errP50: 0.9}}, {{n: 12, errP50: 0.61}, {n: 335, errP50: 0.1}}}
			r.results = []policyResult{
				result("least_load", 655*time.Millisecond, 2980*time.Millisecond, 400*455, 470*time.Millisecond, 175*time.Millisecond, 150, 148, 100),
				ttft,
			}
			held := ttft
			held.slo, held.refused, held.errors = 600*time.Millisecond, 41, 43
			held.perEngine, held.sloMissed, held.worstMiss = []int{190, 150, 19}, []int{12, 9, 2}, []float64{0.42, 0.3, 0.18}
			held.unpredicted, held.unpredictedMissed = []int{2, 1, 3}, []int{0, 1, 3}
			r.held = &held
		}},
		{"none-ran", func(r *report) {}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			r := baseReport()
			tc.edit(&r)
			var b bytes.Buffer
			r.write(&b)
			golden(t, tc.golden, b.String())
		})
	}
}

// golden compares got with testdata/<name>.golden, or rewrites that file
// with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./bench/routing -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("the output differs from %s:\n%s", path, firstDifference(got, string(want)))
	}
}

// firstDifference shows where got and want part, a line of each.
func firstDifference(got, want string) string {
	gl, wl := bytes.Split([]byte(got), []byte("\n")), bytes.Split([]byte(want), []byte("\n"))
	for i := range max(len(gl), len(wl)) {
		var g, w []byte
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if !bytes.Equal(g, w) {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + string(g) + "\nwant: " + string(w)
		}
	}
	return ""
}
