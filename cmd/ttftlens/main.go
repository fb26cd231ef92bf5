// Command ttftlens is a streaming-aware reverse proxy for LLM servers that
// splits each request's time to first token into stages.
//
//	ttftlens [serve] [flags]   run the proxy (the default)
//	ttftlens engine [flags]    run the reference CPU engine alone
//	ttftlens bench [flags]     drive load, join the proxy's records, show the breakdown
//	ttftlens report LOGFILE    stage breakdown and end reasons from the JSON log
//	ttftlens demo SCENARIO     inject a cause in-process and print the diagnosis
//
// Every flag can also be given as an environment variable: TTFTLENS_ and the
// flag name in upper case with - as _ (--admin-listen → TTFTLENS_ADMIN_LISTEN;
// for "engine", TTFTLENS_ENGINE_ and the name). A flag on the command line
// wins over the environment.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = runServe(args)
	case "engine":
		err = runEngine(args)
	case "bench":
		err = runBench(args)
	case "report":
		err = runReport(args)
	case "demo":
		err = runDemo(args)
	case "hash-key":
		err = runHashKey(args)
	case "help":
		fmt.Fprint(os.Stdout, usage)
		return
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", cmd, usage)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "ttftlens:", err)
		os.Exit(2)
	}
}

const usage = `usage: ttftlens [command] [flags]

commands:
  serve    run the proxy (default); without --upstream it starts the
           reference engine in-process as its upstream
  engine   run the reference CPU engine alone
  hash-key print the config entry for an API key (reads the key from stdin)
  bench    drive load against a server and show client-seen TTFT split
           into the proxy's stages (joined by request id)
  report   per route and model: stage p50/p95, end reasons, and the
           dominant stage of the slowest requests, from the JSON log
  demo     run a scenario in-process (demo list) and print the diagnosis
  help     show this text

Run "ttftlens serve -h" for the flags of a command.
`

// parseFlags applies environment variables (envPrefix + the flag name in
// upper case, - as _), then the command line.
func parseFlags(fs *flag.FlagSet, args []string, envPrefix string) error {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	return fs.Parse(args)
}
