package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/ttftlens/ttftlens/bench"
)

const reportHelp = `usage: ttftlens report LOGFILE...   (- reads stdin)

Reads the JSON lines "ttftlens serve" writes to stdout and prints, per route
and model, each stage's p50 and p95, the end reasons, and the stage that
dominates the slowest 10% of first tokens. Several files (the logs of
several replicas) make one report over all their records.
`

// runReport is "ttftlens report LOGFILE...": the stage breakdown, end
// reasons and slow requests' dominant stage per route and model, from the
// proxy's JSON log lines of every file given, merged ("-" reads stdin).
// A file that cannot be read fails the report: it never covers part of
// what was asked.
func runReport(args []string, std stdio) error {
	fs := newFlagSet("report", reportHelp, "TTFTLENS_REPORT_")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	names := fs.Args()
	if len(names) == 0 {
		return usagef("report", "no log file given (- reads stdin)")
	}
	stdin := 0
	for _, n := range names {
		if n == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return usagef("report", "- (stdin) given more than once")
	}
	var recs []bench.Record
	var st bench.LogStats
	for _, name := range names {
		r, s, err := readLogFile(name, std)
		if err != nil {
			return err
		}
		recs = append(recs, r...)
		st.Add(s)
	}
	if len(recs) == 0 {
		return fmt.Errorf("report: no request records in %s (%d lines read)", strings.Join(names, ", "), st.Lines)
	}
	bench.WriteReport(std.out, recs, st)
	return nil
}

// readLogFile reads one log file ("-" is stdin); a read error names it.
func readLogFile(name string, std stdio) ([]bench.Record, bench.LogStats, error) {
	in := std.in
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, bench.LogStats{}, err
		}
		defer f.Close()
		in = f
	} else {
		name = "stdin"
	}
	recs, st, err := bench.ReadLog(in)
	if err != nil {
		return nil, st, fmt.Errorf("report: reading %s: %w", name, err)
	}
	return recs, st, nil
}
