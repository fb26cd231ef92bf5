// Command routing is the routing benchmark (BENCHMARKS.md, "Routing for
// the first token"; docs/routing.md): three reference engines, one of them
// with a prefill twice as slow per token (slow_prefill=2), behind the
// proxy as one pool, and a workload of many users over eight shared
// system prompts of 1,000–1,900 tokens with short questions, streamed, at
// a load where the engines queue. Each routing policy runs in turn on
// fresh engines with the same seed and schedule; the tables give each
// policy's client TTFT p50 and p99, prefix-cache hit share, the stage that
// grew against the best policy, and the requests each engine got. The
// whole set runs once a seed (-seeds, from -seed on), and a last table
// reads the targets seed by seed and over the seeds: runs of one
// seed and code differ by more than most changes move them.
//
//	go run ./bench/routing           # three seeds, a minute and a half per policy: about half an hour
//	go run ./bench/routing -seeds 1  # one seed: about ten minutes
//	go run ./bench/routing -quick    # a check that it works: 5 s a policy, one seed, no calibration
//
// The arrival rate is load (-load) times the capacity a short closed loop
// measures first (-calibrate), unless -rate gives it. With least_ttft
// among the policies, a last run holds it to a TTFT SLO (-slo; by default
// below what the slow engine gives; -slo -1s: no such run): the requests
// refused, and how far past the SLO those served came, beside the
// prediction's error. -replicas N puts N proxies in front of the engines,
// each with its own gateway, and spreads the requests over them: what the
// per-replica prefix index and models cost; -share has them share their
// routing through a redis-server it starts. -records DIR writes each
// run's records, for ttftlens replay (DIR/seed-<n>/ with several seeds).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ttftlens/ttftlens/bench"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// workloadRequests is how many requests the workload draws; the probe
// sends them in turn, from the first again if a run needs more.
const workloadRequests = 2048

func main() {
	o := options{}
	policies := flag.String("policies", gateway.PolicyRoundRobin+","+gateway.PolicyLeastRequest+","+gateway.PolicyLeastLoad+","+gateway.PolicyLeastTTFT,
		"the pool policies to run, comma-separated (those the config refuses are skipped)")
	flag.DurationVar(&o.duration, "duration", 90*time.Second, "how long each policy's run starts requests")
	flag.DurationVar(&o.calibrate, "calibrate", 30*time.Second, "how long the closed loop that measures the capacity runs")
	flag.Float64Var(&o.rate, "rate", 0, "arrivals per second (0: -load times the calibrated capacity)")
	flag.Float64Var(&o.load, "load", 0.9, "the arrival rate as a fraction of the calibrated capacity")
	flag.Uint64Var(&o.seed, "seed", 1, "the seed of the workload and the arrivals")
	flag.IntVar(&o.seeds, "seeds", 3, "how many seeds to run, from -seed on, each the whole set of runs; the targets are read over them")
	flag.IntVar(&o.maxRunning, "max-running", 4, "each engine's running batch")
	flag.IntVar(&o.kvBlocks, "kv-blocks", 384, "each engine's KV cache, in blocks of 16 tokens (384: 6,144 tokens, about half the eight system prompts' tokens, the running requests' blocks among them; 768: all of them)")
	flag.IntVar(&o.maxTokens, "max-tokens", 16, "the tokens each answer has")
	flag.IntVar(&o.warmup, "warmup", 8, "requests sent first in each run and left out of the figures")
	flag.Float64Var(&o.slowPrefill, "slow-prefill", 2, "how many times slower the third engine's prefill is per token")
	flag.DurationVar(&o.slo, "slo", 0, "the TTFT SLO of the extra least_ttft run held to one (0: 0.75 of the slow engine's TTFT p50 under least_ttft; negative, -1s: no such run)")
	flag.BoolVar(&o.share, "share", false, "with -replicas, the least_ttft replicas share their routing (share_routing: redis) through a redis-server the benchmark starts (from PATH)")
	flag.IntVar(&o.replicas, "replicas", 1, "proxy replicas sharing the engines, each with its own gateway (prefix index, TTFT models); the load is spread over them request by request")
	flag.StringVar(&o.records, "records", "", "a directory to write each run's records to, as JSON lines (<policy>.jsonl, least_ttft-slo.jsonl; <policy>-r<i>.jsonl per replica; in seed-<n>/ with several seeds): ttftlens replay reads them")
	quick := flag.Bool("quick", false, "a check that the benchmark works: 5 s per policy at 0.5 requests/s (unless -rate), one seed (unless -seeds), no calibration, no warm-up")
	flag.Parse()
	if *quick {
		o.duration, o.warmup = 5*time.Second, 0
		if o.rate <= 0 {
			o.rate = 0.5
		}
		if !flagSet("seeds") {
			o.seeds = 1
		}
	}
	o.policies = strings.Split(*policies, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, &o); err != nil {
		fmt.Fprintln(os.Stderr, "routing:", err)
		os.Exit(1)
	}
}

// flagSet says the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// replicasText says what the engines are behind: ttftlens, or n replicas
// of it.
func replicasText(n int, shared bool) string {
	switch {
	case n <= 1:
		return "ttftlens"
	case shared:
		return fmt.Sprintf("%d ttftlens replicas (each with its own gateway, the least_ttft replicas sharing their routing through Redis: share_routing; the requests spread over them in turn)", n)
	}
	return fmt.Sprintf("%d ttftlens replicas (each with its own gateway: prefix index, TTFT models, in-flight counts; the requests spread over them in turn)", n)
}

func run(ctx context.Context, o *options) error {
	if o.replicas < 1 {
		return fmt.Errorf("-replicas %d: at least one", o.replicas)
	}
	if o.seeds < 1 {
		return fmt.Errorf("-seeds %d: at least one", o.seeds)
	}
	if err := checkPolicies(o.policies); err != nil {
		return err
	}
	if o.share {
		addr, stop, err := startRedis()
		if err != nil {
			return err
		}
		defer stop()
		o.redisAddr = addr
	}
	tok := model.DefaultTokenizer(model.DefaultConfig())
	base := report{
		heading: fmt.Sprintf("%s: `go run ./bench/routing %s`, %s, %d CPUs",
			time.Now().UTC().Format("2006-01-02"), strings.Join(os.Args[1:], " "), runtime.Version(), runtime.NumCPU()),
		engines: fmt.Sprintf("Three reference engines in one process (max-running %d, %d KV blocks each; engine 3 with slow_prefill=%g) behind %s as one pool",
			o.maxRunning, o.kvBlocks, o.slowPrefill, replicasText(o.replicas, o.share)),
		labels: o.engineLabels(), load: o.load, duration: o.duration, rate: o.rate,
	}
	if base.rate <= 0 && len(o.policies) > 0 {
		fmt.Fprintf(os.Stderr, "calibrating for %s\n", o.calibrate)
		systems, _ := systemPrompts(tok, o.seed)
		c, clients, err := calibrateRate(ctx, o, prompts(systems, requests(o.seed, workloadRequests)))
		if err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
		if base.rate, err = arrivalRate(c, o.load); err != nil {
			return fmt.Errorf("calibration: %w", err)
		}
		base.capacity, base.clients, base.calibrate = c, clients, o.calibrate
		fmt.Fprintf(os.Stderr, "capacity %.2f requests/s; sending %.2f/s\n", c, base.rate)
	}
	// The targets are read where both policies they compare ran; those of
	// the seeds done are printed even when a later one fails.
	judge := slices.Contains(o.policies, gateway.PolicyLeastLoad) && slices.Contains(o.policies, gateway.PolicyLeastTTFT)
	var targets []seedTargets
	defer func() {
		if judge {
			writeTargets(os.Stdout, targets)
		}
	}()
	for i := range o.seeds {
		so := *o
		so.seed += uint64(i)
		if o.records != "" && o.seeds > 1 {
			so.records = filepath.Join(o.records, "seed-"+strconv.FormatUint(so.seed, 10))
		}
		if so.records != "" {
			if err := os.MkdirAll(so.records, 0o755); err != nil {
				return err
			}
		}
		rep := base
		rep.seed = so.seed
		systems, sizes := systemPrompts(tok, so.seed)
		rep.systemTokens = sizes
		if err := runSeed(ctx, &so, &rep, prompts(systems, requests(so.seed, workloadRequests))); err != nil {
			return fmt.Errorf("seed %d: %w", so.seed, err)
		}
		rep.write(os.Stdout)
		targets = append(targets, targetsOf(&rep))
	}
	return nil
}

// runSeed runs each policy of o in turn at rep.rate, then, with
// least_ttft among them, least_ttft held to an SLO, into rep.
func runSeed(ctx context.Context, o *options, rep *report, ps []bench.Prompt) error {
	toks := promptTokens{ps: ps}
	for _, p := range o.policies {
		fmt.Fprintf(os.Stderr, "seed %d, %s: %s at %.2f requests/s\n", o.seed, p, o.duration, rep.rate)
		res, err := runPolicy(ctx, o, p, 0, rep.rate, &toks)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rep.results = append(rep.results, res)
	}
	if !slices.Contains(o.policies, gateway.PolicyLeastTTFT) || o.slo < 0 {
		return nil
	}
	slo := o.slo
	if slo <= 0 {
		slo = defaultSLO(rep.results)
	}
	fmt.Fprintf(os.Stderr, "seed %d, %s held to a %s TTFT SLO: %s at %.2f requests/s\n", o.seed, gateway.PolicyLeastTTFT, slo, o.duration, rep.rate)
	res, err := runPolicy(ctx, o, gateway.PolicyLeastTTFT, slo, rep.rate, &toks)
	if err != nil {
		return fmt.Errorf("%s with an SLO: %w", gateway.PolicyLeastTTFT, err)
	}
	rep.held = &res
	return nil
}
