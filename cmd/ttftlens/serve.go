package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/exporters/web"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
)

// serveFlags are the flags of "ttftlens serve".
type serveFlags struct {
	listen, adminListen string
	tlsCert, tlsKey     string
	configPath          string
	configWatch         time.Duration
	checkConfig         bool
	metricModels        string
	logLevel            string
	grace               time.Duration
	cfg                 proxy.Config
	receive             receiveFlags
	engine              refengine.Config
	// engineFlags are the --engine-* flags given on the command line
	// (not from the environment).
	engineFlags []string
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", ":8080", "address for clients")
	fs.StringVar(&f.adminListen, "admin-listen", "127.0.0.1:9464", "address for the admin endpoints: /metrics, /health (liveness), /ready (readiness, with the upstreams out of rotation and why), /debug/requests, the requests page (/ and /ui), and /engine/metrics with the embedded engine")
	fs.StringVar(&f.cfg.Upstream, "upstream", "", "base URL of the model server, e.g. http://127.0.0.1:8000 (empty, without --config: the embedded reference engine); not with --config")
	fs.StringVar(&f.cfg.Engine, "engine", proxy.EngineAuto, "engine behind the upstreams, for reading its timing: "+strings.Join(engineKinds(), ", ")+" (auto: identify each upstream from /v1/models)")
	fs.StringVar(&f.configPath, "config", "", "gateway config file (YAML): keys, quotas, routes, pools; SIGHUP reloads it, and so does a change of its content (--config-watch) (see gateway/example.yaml)")
	fs.DurationVar(&f.configWatch, "config-watch", 2*time.Second, "with --config, how often to read the config file and reload it when its content changed, as a ConfigMap update or an edit changes it (0: SIGHUP only)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "run every check serve runs before it listens (flags, TLS files, the embedded engine's flags and checkpoint, --config), then exit; nothing is started or bound")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "certificate file (PEM) to serve clients over TLS")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key file (PEM) for --tls-cert")
	fs.StringVar(&f.metricModels, "metric-models", "", "comma-separated model names kept as the model label (others: other); default: the config's routes or the embedded model")
	fs.DurationVar(&f.cfg.FirstTokenTimeout, "first-token-timeout", 120*time.Second, "deadline for the first token, from receipt (negative: none)")
	fs.DurationVar(&f.cfg.TotalTimeout, "total-timeout", proxy.DefaultTotalTimeout, "deadline for the whole request, from receipt (negative: none)")
	fs.DurationVar(&f.cfg.IdleTimeout, "idle-timeout", 60*time.Second, "longest time without generated content after the first token; comments and pings do not count (negative: none)")
	fs.DurationVar(&f.cfg.ClientWriteStall, "client-write-stall", 60*time.Second, "longest a client may take no bytes of a stream before the request ends as client_write_stall and its upstream is closed (negative: none)")
	fs.DurationVar(&f.cfg.StallThreshold, "stall-threshold", time.Second, "inter-token gap counted as a stall")
	fs.IntVar(&f.cfg.MaxEventBytes, "max-event-bytes", 1<<20, "largest upstream SSE event")
	fs.IntVar(&f.cfg.MaxBodyBytes, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest request body (413 over it, unread) and non-streamed response body")
	fs.IntVar(&f.cfg.MaxBodyMemory, "max-body-memory", proxy.DefaultMaxBodyMemory, "bytes the bodies of the requests in flight may hold together (503 body_memory_full over it); at least --max-body-bytes")
	fs.IntVar(&f.cfg.MaxBodyMemoryPerKey, "max-body-memory-per-key", 0, "bytes the bodies under one API key may hold together (503 body_memory_full over it); 0: a quarter of --max-body-memory, at least --max-body-bytes; negative: no share")
	fs.IntVar(&f.cfg.MaxHeaderBytes, "max-header-bytes", proxy.DefaultMaxHeaderBytes, "largest request line and headers together (431 over it); each client connection holds a buffer of this size")
	fs.IntVar(&f.cfg.MaxConns, "max-conns", 0, "client connections open at once; more are refused as they are accepted (503; negative: no cap; 0: from the open-file limit, (ulimit -n − "+strconv.Itoa(proxy.FileReserve)+") / 2, at most "+strconv.Itoa(proxy.DefaultMaxConns)+")")
	fs.IntVar(&f.cfg.MaxConnsPerClient, "max-conns-per-client", proxy.DefaultMaxConnsPerClient, "client connections open at once from one IP address (429 over it; negative: no cap; raise it behind a load balancer that connects from one address)")
	fs.IntVar(&f.cfg.MaxUpstreamHeaderBytes, "max-upstream-header-bytes", 16<<10, "largest upstream response status line and headers (at least 1024); each request holds a read buffer of this size while it reads them")
	fs.BoolVar(&f.cfg.AllowBreakdown, "allow-breakdown", false, "let clients ask for their own TTFT breakdown with the X-Ttftlens-Breakdown header (with --config: per key, allow_breakdown)")
	fs.BoolVar(&f.cfg.AllowFaults, "allow-faults", false, "pass clients' X-Ttftlens-Fault headers to the upstream and let the embedded engine inject them (refengine/FAULTS.md); off: stripped")
	fs.Var(scrapeFlag{&f.cfg.ScrapeEngineMetrics}, "scrape-engine-metrics", "poll each upstream's /metrics every `duration`: the engine's waiting and running counts on every request, and its own counts of tokens generated and requests aborted for clients that left (ttftlens_upstream_tokens_after_cancel_total, ttftlens_upstream_aborted_requests_total); a least_load or least_ttft pool's upstreams are polled every "+proxy.DefaultLeastLoadScrape.String()+" unless this is given (0: off, those pools aside)")
	fs.DurationVar(&f.cfg.Heartbeat, "heartbeat", 0, "send an SSE comment after this much upstream silence, at event boundaries (for idle-timeout load balancers; 0: off)")
	fs.StringVar(&f.cfg.CompressStreams, "compress-streams", "", "compress event streams to clients that accept it: gzip or zstd, flushed per event (off when empty)")
	fs.BoolVar(&f.cfg.PassEngineTiming, "pass-engine-timing", false, "forward the engine's Server-Timing header and timing comments to clients")
	fs.StringVar(&f.logLevel, "log-level", "info", "level of operational logs on stderr: "+strings.Join(logLevels, ", "))
	fs.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long in-flight requests may finish after SIGTERM; those still running then are cut (deadline/shutdown), each with its record; with a receiver, records waiting for their engine's span are written within it too")
	f.receive.register(fs)
	prefixedFlags(fs, "engine-", f.engine.RegisterFlags)
}

// scrapeFlag is --scrape-engine-metrics, proxy.Config.ScrapeEngineMetrics:
// left 0 (proxy.DefaultEngineScrape, and least_load pools' own interval)
// until given; given 0 (or less), off.
type scrapeFlag struct{ d *time.Duration }

func (f scrapeFlag) String() string {
	switch {
	case f.d == nil || *f.d < 0: // nil: the flag package's zero value
		return "0s"
	case *f.d == 0:
		return proxy.DefaultEngineScrape.String()
	}
	return f.d.String()
}

func (f scrapeFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d <= 0 {
		d = -1
	}
	*f.d = d
	return nil
}

// Get is the interval as given (for the flag package's error messages).
func (f scrapeFlag) Get() any { return *f.d }

const serveHelp = `usage: ttftlens serve [flags]

Runs the proxy. With no --upstream and no --config it starts the reference
engine in this process as its upstream. Every flag is also an environment
variable: TTFTLENS_ and the name in upper case with - as _ (a flag on the
command line wins).

flags:
`

func runServe(args []string, std stdio) error {
	var f serveFlags
	fs := newFlagSet("serve", serveHelp, "TTFTLENS_")
	f.register(fs.FlagSet)
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) {
		if strings.HasPrefix(fl.Name, "engine-") {
			f.engineFlags = append(f.engineFlags, "--"+fl.Name)
		}
	})
	// One function checks and prepares everything for serve and for
	// --check-config, so they cannot disagree.
	plan, err := f.prepare()
	if err != nil {
		return err
	}
	if f.checkConfig {
		plan.close()
		plan.describe(std.out, &f)
		return nil
	}
	return serve(&f, plan)
}

// serve runs the proxy as planned until SIGINT or SIGTERM. SIGHUP reloads
// the config file (--config); without one it is logged and changes
// nothing. It is caught from here to the end, through the drain.
func serve(f *serveFlags, plan *servePlan) error {
	log := plan.log
	defer catchHangups(log, plan.gw == nil)()
	defer plan.close()
	adminRoutes := map[string]fasthttp.RequestHandler{}
	var models []string
	switch {
	case plan.gw != nil:
		gw := plan.gw
		gw.Start()
		defer gw.Stop()
		f.cfg.Gateway = gw
		models = routeModels(gw)
		defer startConfigReloader(gw, f.configPath, plan.configSum, f.configWatch, log)()
	case plan.embedded:
		f.engine.AllowFaults = f.cfg.AllowFaults
		srv, url, err := startEmbeddedEngine(f.engine)
		if err != nil {
			return err
		}
		defer srv.Close()
		f.cfg.Upstream, f.cfg.UpstreamName, f.cfg.Engine = url, "embedded-engine", engines.KindReference
		models = []string{srv.Config().ModelName}
		adminRoutes["/engine/metrics"] = engineMetrics(srv) // its vllm:* series, scrapeable
		log.Info().Str("upstream", url).Msg("no --upstream: started the reference engine in-process")
	}
	if f.metricModels != "" {
		models = strings.Split(f.metricModels, ",")
	}

	reg := exporters.NewRegistry()
	records := exporters.NewLogSink(os.Stdout, exporters.LogOptions{})
	defer records.Close()
	upstreams, err := upstreamNames(&f.cfg)
	if err != nil {
		return err
	}
	build := readBuildInfo()
	metrics := exporters.NewMetrics(reg, exporters.MetricOptions{Upstreams: upstreams, Models: models, Policies: gateway.Policies(), Version: build.Version, Revision: build.Revision})
	ring := exporters.NewRing(exporters.RingOptions{}) // the page and /debug/requests
	named := []exporters.Named{{Name: "log", Sink: records}, {Name: "metrics", Sink: metrics}, {Name: "ring", Sink: ring}}
	if plan.traces != nil { // closed by plan.close, after the proxy's shutdown: its last records are exported too
		named = append(named, exporters.Named{Name: "otlp", Sink: plan.traces})
	}
	sinks := exporters.NewFanout(named...)
	sinks.Track(metrics)
	f.cfg.Tracker = metrics
	f.cfg.Refusals = metrics
	f.cfg.ConnDiscards = metrics
	f.cfg.EngineWaste = metrics // the engines' own counts, as --scrape-engine-metrics scrapes them
	var sink record.Sink = sinks
	var rcv *spanReceiver
	if f.receive.on() {
		if rcv, err = startReceiver(&f.receive, sinks, plan.traces, reg, &log); err != nil {
			return err
		}
		sink = rcv.joiner
		defer rcv.stop(context.Background()) // on an early return; after the shutdown below, a no-op
	}
	p, err := proxy.New(f.cfg, sink, log)
	if err != nil {
		return err
	}
	p.LogConnCap()
	reg.MustRegister(gateway.NewCollector(p.Gateway(), p.UpstreamLabel))
	ln, err := listen(f.listen, plan.cert)
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", f.adminListen)
	if err != nil {
		ln.Close()
		return err
	}
	for path, h := range web.Routes(ring) {
		adminRoutes[path] = h
	}
	if rcv != nil {
		adminRoutes[exporters.RequestsPrefix] = rcv.pending(adminRoutes[exporters.RequestsPrefix])
	}
	adminRoutes["/ready"] = p.Ready
	admin := &fasthttp.Server{Handler: exporters.AdminHandler(reg, adminRoutes), Name: "ttftlens-admin"}
	// Signals are ours before the log says we serve: a SIGTERM that
	// follows that line is a shutdown, never the default exit.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	errc := make(chan error, 2)
	go func() { errc <- p.Serve(ln) }()
	go func() { errc <- admin.Serve(adminLn) }()
	log.Info().Str("listen", ln.Addr().String()).Str("admin", adminLn.Addr().String()).
		Strs("upstreams", upstreams).Bool("tls", f.tlsCert != "").Msg("ttftlens serving")

	select {
	case err = <-errc:
	case s := <-sig:
		log.Info().Str("signal", s.String()).Msg("shutting down")
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	switch e := p.Shutdown(ctx); {
	case errors.Is(e, proxy.ErrGraceCut):
		// What --shutdown-grace promises, each cut request recorded
		// (deadline/shutdown): the stop went as asked, the exit is 0.
		log.Warn().Err(e).Msg("requests cut at --shutdown-grace, each recorded deadline/shutdown")
	case e != nil && err == nil:
		err = e
	}
	if rcv != nil { // within the same grace: the last records wait for their spans too
		rcv.stop(ctx)
	}
	_ = admin.ShutdownWithContext(ctx)
	return err
}
