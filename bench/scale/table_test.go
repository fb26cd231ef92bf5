package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current tables")

// c1Rows is a c1 workload measured through names: each proxy a little
// slower than the one before it.
func c1Rows(names []string) workloadResult {
	w := workload{name: "c1", label: "c=1, 16 tokens", cfg: clientConfig{Tokens: 16, Requests: 3000, Conc: 1}}
	r := workloadResult{w: w, proxied: map[string]run{}, names: names}
	direct := func(ttft time.Duration) run {
		return run{res: clientResult{Requests: 3000, OK: 3000, Events: 48000, TTFTP50: int64(ttft)}}
	}
	r.direct = append(r.direct, direct(200*time.Microsecond))
	for i, name := range names {
		f := time.Duration(10+5*i) * time.Microsecond
		r.proxied[name] = run{proxy: true,
			res: clientResult{Requests: 3000, OK: 3000, Events: 48000, TTFTP50: int64(200*time.Microsecond + 8*f)},
			cpu: 3000 * 18 * f, kernelCPU: 3000 * 9 * f,
			perf: perfCounts{syscalls: int64(48000 * (2 + i)), switches: int64(4800 * (1 + i))}}
		r.direct = append(r.direct, direct(time.Duration(210+10*i)*time.Microsecond))
	}
	return r
}

// kneeRows is a knee workload through names: the first proxy's added
// TTFT p99 reaches the budget near 1,100 streams a second, the second's
// ramp ends at the rig's limit, the third's reaches the budget near 750.
func kneeRows(names []string) workloadResult {
	plan := kneePlan{start: 250, top: 8000, factor: 1.25, refine: 2, step: 2 * time.Second}
	r := workloadResult{w: workload{name: "knee", label: "new streams, 6 tokens 20 ms apart, 2 s per rate", cfg: kneeStream, knee: &plan},
		ramps: map[string][]kneeStep{}, names: names}
	ms, us := time.Millisecond, time.Microsecond
	slope := []time.Duration{8 * us, 4 * us, 12 * us}
	for i, name := range names {
		r.ramps[name] = runRamp(plan, func(rate int) kneeStep {
			direct := 2 * ms
			if i == 1 && rate >= 1800 {
				direct = 11 * ms
			}
			return step(rate, direct, direct+ms+time.Duration(rate)*slope[i])
		})
	}
	return r
}

func TestPrintTables(t *testing.T) {
	tests := []struct {
		golden string
		names  []string
		knee   bool // the knee alone
	}{
		{"nginx-ttftlens", []string{"nginx", "ttftlens"}, false},
		{"with-base", []string{"nginx", "ttftlens", "ttftlens-base"}, false},
		{"ttftlens-alone", []string{"ttftlens"}, false},
		{"knee-alone", []string{"nginx", "ttftlens"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			rows := []workloadResult{c1Rows(tt.names), kneeRows(tt.names)}
			if tt.knee {
				rows = rows[1:]
			}
			var out bytes.Buffer
			printTables(&out, tt.names, rows)
			path := filepath.Join("testdata", tt.golden+".golden")
			if *update {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("the tables differ from %s (-update rewrites it):\n%s", path, out.Bytes())
			}
		})
	}
}
