package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/ttftlens/ttftlens/bench/lab"
)

// runDemo is "ttftlens demo SCENARIO": the proof suite's scenarios, run
// in-process (engine and proxy on free loopback ports), with the
// diagnosis printed.
func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ttftlens demo SCENARIO | list\n\n"+
			"Runs the reference engine and the proxy in this process, injects a cause of a\n"+
			"slow first token (after a baseline run) or produces an end reason, and prints\n"+
			"what ttftlens made of it. \"ttftlens demo list\" lists the scenarios.")
	}
	if err := parseFlags(fs, args, "TTFTLENS_DEMO_"); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return flag.ErrHelp
	}
	name := fs.Arg(0)
	if name == "list" {
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "causes of a slow first token:")
		for _, s := range lab.Scenarios() {
			fmt.Fprintf(tw, "  %s\t%s\n", s.Name, s.Cause)
		}
		fmt.Fprintln(tw, "end reasons:")
		for _, c := range lab.EndCases() {
			fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Cause)
		}
		return tw.Flush()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if s, ok := lab.Lookup(name); ok {
		d, err := s.Run(ctx)
		if err != nil {
			return err
		}
		d.WriteText(os.Stdout)
		return nil
	}
	if c, ok := lab.LookupEnd(name); ok {
		run, err := c.Run(ctx, 1)
		if err != nil {
			return err
		}
		fmt.Printf("scenario %s: %s\n", c.Name, c.Cause)
		for _, r := range run.Results {
			fmt.Printf("  client saw: %s", r.End)
			if r.Status != 0 {
				fmt.Printf(" (status %d)", r.Status)
			}
			if r.HasTTFT {
				fmt.Printf(", first token after %.1f ms, %d tokens", float64(r.TTFT.Microseconds())/1000, r.Tokens)
			}
			fmt.Println()
			if r.Record == nil {
				fmt.Printf("  no record joined: %s\n", r.JoinErr)
				continue
			}
			rec := r.Record
			fmt.Printf("  ttftlens recorded: end_reason %s, end_detail %s", rec.EndReason, rec.EndDetail)
			if rec.Phase != "" {
				fmt.Printf(", phase %s", rec.Phase)
			}
			fmt.Printf(", status %d, %.1f ms\n", rec.Status, float64(rec.E2E.Microseconds())/1000)
		}
		return nil
	}
	return fmt.Errorf("demo: unknown scenario %q (ttftlens demo list)", name)
}
