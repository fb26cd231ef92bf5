package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/ttftlens/ttftlens/bench/lab"
)

const demoHelp = `usage: ttftlens demo SCENARIO | list

Runs the reference engine and the proxy in this process, injects a cause of a
slow first token (after a baseline run) or produces an end reason, and prints
what ttftlens made of it. "ttftlens demo list" lists the scenarios.
`

// runDemo is "ttftlens demo SCENARIO": the proof suite's scenarios, run
// in-process (engine and proxy on free loopback ports), with the
// diagnosis printed.
func runDemo(args []string, std stdio) error {
	fs := newFlagSet("demo", demoHelp, "TTFTLENS_DEMO_")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		return usagef("demo", "no scenario given ('ttftlens demo list' lists them)")
	case 1:
	default:
		return usagef("demo", "%d arguments %q: give one scenario", fs.NArg(), fs.Args())
	}
	name := fs.Arg(0)
	if name == "list" {
		tw := tabwriter.NewWriter(std.out, 0, 0, 2, ' ', 0)
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
		d.WriteText(std.out)
		return nil
	}
	if c, ok := lab.LookupEnd(name); ok {
		run, err := c.Run(ctx, 1)
		if err != nil {
			return err
		}
		fmt.Fprintf(std.out, "scenario %s: %s\n", c.Name, c.Cause)
		for _, r := range run.Results {
			fmt.Fprintf(std.out, "  client saw: %s", r.End)
			if r.Status != 0 {
				fmt.Fprintf(std.out, " (status %d)", r.Status)
			}
			if r.HasTTFT {
				fmt.Fprintf(std.out, ", first token after %.1f ms, %d tokens", float64(r.TTFT.Microseconds())/1000, r.Tokens)
			}
			fmt.Fprintln(std.out)
			if r.Record == nil {
				fmt.Fprintf(std.out, "  no record joined: %s\n", r.JoinErr)
				continue
			}
			rec := r.Record
			fmt.Fprintf(std.out, "  ttftlens recorded: end_reason %s, end_detail %s", rec.EndReason, rec.EndDetail)
			if rec.Phase != "" {
				fmt.Fprintf(std.out, ", phase %s", rec.Phase)
			}
			fmt.Fprintf(std.out, ", status %d, %.1f ms\n", rec.Status, float64(rec.E2E.Microseconds())/1000)
		}
		return nil
	}
	return usagef("demo", "unknown scenario %q ('ttftlens demo list' lists them)", name)
}
