// Command ttftlens is a streaming-aware reverse proxy for LLM servers that
// splits each request's time to first token into stages.
//
//	ttftlens [serve] [flags]   run the proxy (the default)
//	ttftlens engine [flags]    run the reference CPU engine alone
//	ttftlens bench [flags]     drive load, join the proxy's records, show the breakdown
//	ttftlens report LOGFILE    stage breakdown and end reasons from the JSON log
//	ttftlens replay LOGFILE    a least_ttft pool's log replayed through the TTFT model
//	ttftlens demo SCENARIO     inject a cause in-process and print the diagnosis
//	ttftlens hash-key          print the config file value of an API key read from stdin
//	ttftlens version           print the version, VCS revision and Go version it was built from
//
// Every flag can also be given as an environment variable: TTFTLENS_ and the
// flag name in upper case with - as _ (--admin-listen → TTFTLENS_ADMIN_LISTEN;
// for "engine", TTFTLENS_ENGINE_ and the name). A flag on the command line
// wins over the environment.
//
// Exit status: 0 on success and when help was asked for, 2 for a command
// line or configuration that cannot run (and other failures), 1 when bench
// cannot reach the server or a bench run's every request failed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/internal/suggest"
)

func main() {
	os.Exit(run(os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

// stdio is where a command reads and writes, so tests can run commands.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// commands are the subcommands by name.
var commands = map[string]func(args []string, std stdio) error{
	"serve":    runServe,
	"engine":   runEngine,
	"bench":    runBench,
	"report":   runReport,
	"replay":   runReplay,
	"demo":     runDemo,
	"hash-key": runHashKey,
	"version":  runVersion,
}

// run runs the command line args (without the program name) and returns
// the exit status.
func run(args []string, std stdio) int {
	cmd := "serve"
	if len(args) > 0 {
		switch a := args[0]; {
		case isHelp(a):
			fmt.Fprint(std.out, usage)
			return 0
		case a == "help":
			if len(args) == 1 {
				fmt.Fprint(std.out, usage)
				return 0
			}
			cmd, args = args[1], []string{"-h"} // "help bench" is "bench -h"
		case a == "--version" || a == "-version":
			cmd, args = "version", args[1:]
		case !strings.HasPrefix(a, "-"):
			cmd, args = a, args[1:]
		}
	}
	fn, ok := commands[cmd]
	if !ok {
		hint := ""
		if near := suggest.Nearest(cmd, slices.Sorted(maps.Keys(commands))); near != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		fmt.Fprintf(std.err, "ttftlens: unknown command %q%s\nrun 'ttftlens help' for the commands\n", cmd, hint)
		return 2
	}
	return exitStatus(fn(args, std), std.err)
}

// isHelp reports a request for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

const usage = `usage: ttftlens [command] [flags]

commands:
  serve     run the proxy (the default command; no --upstream: built-in engine)
  engine    run the reference CPU engine alone
  bench     drive load; split client-seen TTFT into the proxy's stages
  report    stage p50/p95, end reasons, slowest requests' stage from serve's log
  replay    replay a least_ttft pool's log through the TTFT model: its error
  demo      inject a cause in-process and print the diagnosis (demo list)
  hash-key  print the config file value of an API key read from stdin
  version   print the version, VCS revision and Go version (also --version)
  help      show this text; "help COMMAND" is "COMMAND -h"

Run 'ttftlens COMMAND -h' for a command's flags, e.g. 'ttftlens serve -h'.
Every flag is also an environment variable: TTFTLENS_<FLAG> for serve,
TTFTLENS_<COMMAND>_<FLAG> for the others (e.g. TTFTLENS_BENCH_URL).
`

// usageError is a command line a command cannot run: the process exits with
// status 2, after the message and a pointer to the command's help.
type usageError struct {
	cmd, msg string
	hasFlags bool // the help lists flags (otherwise it is a usage line)
}

func (e *usageError) Error() string { return e.cmd + ": " + e.msg }

// usagef returns a usageError for cmd, a command without flags.
func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)}
}

// exitError ends the process with its own status, after printing err as
// the command's.
type exitError struct {
	cmd  string
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitStatus prints err for the user and returns the status to exit with.
func exitStatus(err error, stderr io.Writer) int {
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		what := "its usage"
		if ue.hasFlags {
			what = "the flags"
		}
		fmt.Fprintf(stderr, "ttftlens %s: %s\nrun 'ttftlens %s -h' for %s\n", ue.cmd, ue.msg, ue.cmd, what)
		return 2
	case errors.As(err, &ee):
		fmt.Fprintf(stderr, "ttftlens %s: %v\n", ee.cmd, ee.err)
		return ee.code
	}
	fmt.Fprintln(stderr, "ttftlens:", err)
	return 2
}

// flagSet is a command's flags, with its help text and environment prefix.
// A flag error comes back as a usageError (one line, no dump of every flag);
// -h prints the help to stdout and comes back as flag.ErrHelp.
type flagSet struct {
	*flag.FlagSet
	help      string // printed before the flags' defaults
	envPrefix string
}

func newFlagSet(name, help, envPrefix string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), help: help, envPrefix: envPrefix}
	fs.SetOutput(io.Discard) // the flag package would print the error and every flag
	fs.Usage = func() {}
	return fs
}

// parse applies environment variables (envPrefix + the flag name in upper
// case, - as _), then the command line.
func (fs *flagSet) parse(args []string, std stdio) error {
	var envErr string
	fs.VisitAll(func(f *flag.Flag) {
		name := fs.envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == "" {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Sprintf("%s=%q: %s", name, v, valueError(f, v, err.Error()))
			}
		}
	})
	if envErr != "" {
		return fs.usageError(envErr)
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.printHelp(std.out)
		return flag.ErrHelp
	case err != nil:
		return fs.usageError(fs.explain(err.Error()))
	}
	return nil
}

// explain adds what to do to a flag package error message: the flag meant
// by one not defined, the units of a duration.
func (fs *flagSet) explain(msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near := suggest.Nearest(name, names); near != "" {
			return msg + " (did you mean -" + near + "?)"
		}
		return msg
	}
	// The flag package's `invalid value "V" for flag -NAME: ERR`.
	rest, ok := strings.CutPrefix(msg, "invalid value ")
	if !ok {
		return msg
	}
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return msg
	}
	name, reason, ok := strings.Cut(strings.TrimPrefix(rest[len(quoted):], " for flag -"), ": ")
	f := fs.Lookup(name)
	if !ok || f == nil {
		return msg
	}
	value, _ := strconv.Unquote(quoted)
	return msg[:len(msg)-len(reason)] + valueError(f, value, reason)
}

// valueError is why value is not one for f: reason, the flag's own error,
// unless f is a duration, whose error is Go's bare "parse error".
func valueError(f *flag.Flag, value, reason string) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return reason
	}
	if _, ok := g.Get().(time.Duration); !ok {
		return reason
	}
	if _, err := strconv.ParseFloat(value, 64); err == nil {
		return "use a unit: " + durationExamples
	}
	return "not a duration: use a number and a unit: " + durationExamples
}

// durationExamples are durations as flags take them (time.ParseDuration).
const durationExamples = "30s, 500ms, 2m, 1h30m (units: ns, us, ms, s, m, h)"

// usageError is a usageError of this command.
func (fs *flagSet) usageError(msg string) error {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return &usageError{cmd: fs.Name(), msg: msg, hasFlags: n > 0}
}

// printHelp writes the help text and every flag with its default.
func (fs *flagSet) printHelp(w io.Writer) {
	fmt.Fprint(w, fs.help)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// noArgs refuses arguments left after the flags.
func (fs *flagSet) noArgs() error {
	if fs.NArg() > 0 {
		return fs.usageError(fmt.Sprintf("unexpected argument %q (%s takes flags only)", fs.Arg(0), fs.Name()))
	}
	return nil
}
