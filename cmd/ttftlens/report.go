package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ttftlens/ttftlens/bench"
)

// runReport is "ttftlens report LOGFILE": the stage breakdown, end reasons
// and slow requests' dominant stage per route and model, from the proxy's
// JSON log lines ("-" reads stdin).
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ttftlens report LOGFILE   (- for stdin)\n\n"+
			"Reads the JSON lines \"ttftlens serve\" writes to stdout and prints, per route and\n"+
			"model, each stage's p50 and p95, the end reasons, and the stage that dominates\n"+
			"the slowest 10% of first tokens.")
	}
	if err := parseFlags(fs, args, "TTFTLENS_REPORT_"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return flag.ErrHelp
	}
	var in io.Reader = os.Stdin
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
	bench.WriteReport(os.Stdout, recs, st)
	return nil
}
