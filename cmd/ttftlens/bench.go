package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/ttftlens/ttftlens/bench"
)

// runBench is "ttftlens bench": load against a server, client-side figures
// joined with the proxy's records.
func runBench(args []string, std stdio) error {
	cfg := bench.Config{PromptTokens: bench.Dist{Min: 64, Max: 64}, OutputTokens: bench.Dist{Min: 64, Max: 64}}
	hdr := bench.Headers(http.Header{})
	var promptsFile, sweep string
	var asJSON, stream bool
	fs := newFlagSet("bench", benchHelp, "TTFTLENS_BENCH_")
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "base URL of the server (ttftlens or any OpenAI-compatible one)")
	fs.StringVar(&cfg.Admin, "admin", "http://127.0.0.1:9464", "ttftlens admin listener to join records from (empty: none)")
	fs.StringVar(&cfg.Model, "model", "ttftlens-ref", "model name sent")
	fs.IntVar(&cfg.Concurrency, "c", 1, "closed loop: clients, each sending its next request when the last is over")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests per second, Poisson arrivals (overrides -c)")
	fs.IntVar(&cfg.Requests, "n", 0, "measured requests (default 100 when -d is not given)")
	fs.DurationVar(&cfg.Duration, "d", 0, "start requests for this long (e.g. 30s)")
	fs.IntVar(&cfg.Warmup, "warmup", 0, "requests sent first and left out of the figures")
	fs.Var(&cfg.PromptTokens, "prompt-tokens", "prompt length in tokens: N, or A:B for uniform (ignored with --prompts)")
	fs.Var(&cfg.OutputTokens, "output-tokens", "max_tokens: N, or A:B for uniform (0: not sent)")
	fs.BoolVar(&cfg.IgnoreEOS, "ignore-eos", true, `send "ignore_eos": true so generations run to max_tokens`)
	fs.StringVar(&promptsFile, "prompts", "", `JSONL file of prompts, one {"prompt": "..."} or {"messages": [...]} per line`)
	fs.BoolVar(&stream, "stream", true, "ask for an event stream (--stream=false: whole responses)")
	fs.BoolVar(&cfg.Completions, "completions", false, "use /v1/completions instead of /v1/chat/completions")
	fs.Var(hdr, "H", `header for every request, "Key: Value" (repeatable)`)
	fs.StringVar(&cfg.APIKey, "api-key", "", "sent as Authorization: Bearer KEY")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "give up on a request after this long (0: never)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed for the lengths drawn (0: random)")
	fs.StringVar(&sweep, "sweep", "", "closed-loop concurrency levels to run in turn, e.g. 1,2,4,8")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	cfg.NoStream = !stream
	cfg.Header = http.Header(hdr)
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Requests = 100
	}
	if promptsFile != "" {
		f, err := os.Open(promptsFile)
		if err != nil {
			return err
		}
		cfg.Prompts, err = bench.ReadPrompts(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	cfg.Progress = std.err
	if f, ok := std.err.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			cfg.ProgressTTY = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if sweep == "" {
		run, err := cfg.Run(ctx)
		if err != nil {
			return benchError(err)
		}
		s := bench.Summarize(run)
		if asJSON {
			err = json.NewEncoder(std.out).Encode(s)
		} else {
			s.WriteText(std.out, "ttftlens bench: "+cfg.URL+", "+cfg.Describe())
		}
		if err == nil && s.AllFailed() {
			err = allFailed(s.Requests, s.TopErrors)
		}
		return err
	}
	levels, err := parseLevels(sweep)
	if err != nil {
		return err
	}
	if cfg.Rate > 0 {
		return errors.New("--sweep varies the closed loop's concurrency: drop --rate")
	}
	var rows []bench.SweepRow
	for _, c := range levels {
		cfg.Concurrency = c
		if !asJSON {
			fmt.Fprintf(std.err, "bench: concurrency %d\n", c)
		}
		run, err := cfg.Run(ctx)
		if err != nil {
			return benchError(err)
		}
		rows = append(rows, bench.SweepRow{Concurrency: c, Summary: bench.Summarize(run)})
		if ctx.Err() != nil {
			break
		}
	}
	if asJSON {
		err = json.NewEncoder(std.out).Encode(rows)
	} else {
		cfg.Concurrency = 0
		fmt.Fprintf(std.out, "ttftlens bench sweep: %s, %s\n", cfg.URL, strings.Replace(cfg.Describe(), "closed loop c=1", "closed loop", 1))
		bench.WriteSweep(std.out, rows)
	}
	total, failed := 0, 0
	var top []bench.ErrorCount
	for _, r := range rows {
		total, failed = total+r.Summary.Requests, failed+r.Summary.Errors
		if top == nil {
			top = r.Summary.TopErrors
		}
	}
	if err == nil && total > 0 && failed == total {
		err = allFailed(total, top)
	}
	return err
}

// allFailed is the error of a run whose every request failed: exit status
// 1, naming the most common error.
func allFailed(n int, top []bench.ErrorCount) error {
	err := fmt.Errorf("all %d requests failed", n)
	if n == 1 {
		err = errors.New("the request failed")
	}
	if len(top) > 0 {
		err = fmt.Errorf("%w (%s)", err, top[0].Text)
	}
	return &exitError{cmd: "bench", code: 1, err: err}
}

// benchError is the error of a run that could not start: exit status 1 for
// a server that cannot be reached, else err as it is.
func benchError(err error) error {
	var ue *bench.UnreachableError
	if errors.As(err, &ue) {
		return &exitError{cmd: "bench", code: 1, err: err}
	}
	return err
}

const benchHelp = `usage: ttftlens bench [flags]

Drives load against a server (ttftlens, or any OpenAI-compatible one) and
measures what clients see: time to first token, inter-token gaps and time to
completion; joins each request with ttftlens' record (--admin) to split the
client's TTFT into the proxy's stages. Exits 1 when the server cannot be
reached (nothing is sent then) or every request failed.
Every flag is also an environment variable: TTFTLENS_BENCH_ and the name in
upper case with - as _.

flags:
`

// parseLevels reads "1,2,4,8".
func parseLevels(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > 100000 {
			return nil, fmt.Errorf("--sweep %q: want positive concurrency levels separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}
