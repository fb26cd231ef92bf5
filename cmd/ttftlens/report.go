package main

import (
	"fmt"
	"os"
	"slices"
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
	names, err := logFileArgs("report", fs.Args())
	if err != nil {
		return err
	}
	recs, st, err := readLogFiles("report", names, std)
	if err != nil {
		return err
	}
	bench.WriteReport(std.out, recs, st)
	return nil
}

// readLogFiles reads the records of every log file named (at most one
// "-": stdin) for the command cmd; a file that cannot be read, or no
// record in all of them, fails it.
func readLogFiles(cmd string, names []string, std stdio) ([]bench.Record, bench.LogStats, error) {
	var recs []bench.Record
	var st bench.LogStats
	for _, name := range names {
		r, s, err := readLogFile(cmd, name, std)
		if err != nil {
			return nil, st, err
		}
		recs = append(recs, r...)
		st.Add(s)
	}
	if len(recs) == 0 {
		return nil, st, fmt.Errorf("%s: no request records in %s (%d lines read)", cmd, strings.Join(names, ", "), st.Lines)
	}
	return recs, st, nil
}

// logFileArgs checks a command's log file arguments: at least one, "-"
// (stdin) at most once.
func logFileArgs(cmd string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, usagef(cmd, "no log file given (- reads stdin)")
	}
	if i := slices.Index(names, "-"); i >= 0 && slices.Contains(names[i+1:], "-") {
		return nil, usagef(cmd, "- (stdin) given more than once")
	}
	return names, nil
}

// readLogFile reads one log file ("-" is stdin) for the command cmd; a
// read error names it.
func readLogFile(cmd, name string, std stdio) ([]bench.Record, bench.LogStats, error) {
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
		return nil, st, fmt.Errorf("%s: reading %s: %w", cmd, name, err)
	}
	return recs, st, nil
}
