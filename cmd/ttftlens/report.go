package main

import (
	"fmt"
	"os"

	"github.com/ttftlens/ttftlens/bench"
)

const reportHelp = `usage: ttftlens report LOGFILE   (- reads stdin)

Reads the JSON lines "ttftlens serve" writes to stdout and prints, per route
and model, each stage's p50 and p95, the end reasons, and the stage that
dominates the slowest 10% of first tokens.
`

// runReport is "ttftlens report LOGFILE": the stage breakdown, end reasons
// and slow requests' dominant stage per route and model, from the proxy's
// JSON log lines ("-" reads stdin).
func runReport(args []string, std stdio) error {
	fs := newFlagSet("report", reportHelp, "TTFTLENS_REPORT_")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		return usagef("report", "no log file given (- reads stdin)")
	case 1:
	default:
		return usagef("report", "%d arguments: give one log file (- reads stdin)", fs.NArg())
	}
	in := std.in
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	recs, st, err := bench.ReadLog(in)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("report: no request records in %s (%d lines read)", fs.Arg(0), st.Lines)
	}
	bench.WriteReport(std.out, recs, st)
	return nil
}
