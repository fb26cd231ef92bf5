package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// servePlan is what serve runs, checked and prepared from the flags before
// anything listens. --check-config builds the same plan and stops there.
type servePlan struct {
	log       zerolog.Logger
	gw        *gateway.Gateway // from --config; not started
	configSum [32]byte         // SHA-256 of the --config content gw was built from
	embedded  bool             // the reference engine runs in-process as the upstream
	cert      *tls.Certificate // --tls-cert and --tls-key, loaded
	traces    *exporters.OTLPSink
}

// prepare runs every check serve runs before it starts listening, in the
// order serve needs them, and returns what they produced. Serve and
// --check-config both call it: there is no other validation path.
func (f *serveFlags) prepare() (*servePlan, error) {
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return nil, err
	}
	plan := &servePlan{log: zerolog.New(os.Stderr).Level(level).With().Timestamp().Logger()}
	if err := checkEngineKind(f.cfg.Engine); err != nil {
		return nil, err
	}
	if f.grace < 0 {
		return nil, fmt.Errorf("--shutdown-grace %v: negative", f.grace)
	}
	if f.receive.wait <= 0 || f.receive.maxWaiting <= 0 || f.receive.maxBytes <= 0 {
		return nil, fmt.Errorf("--receive-otlp-wait %v, --receive-otlp-max-waiting %d, --receive-otlp-max-bytes %d: each must be positive",
			f.receive.wait, f.receive.maxWaiting, f.receive.maxBytes)
	}
	if f.configWatch < 0 {
		return nil, fmt.Errorf("--config-watch %v: negative (0: no watch, SIGHUP only)", f.configWatch)
	}
	if err := checkListen(listenFlag{flag: "--listen", addr: f.listen}, listenFlag{flag: "--admin-listen", addr: f.adminListen},
		listenFlag{flag: "--receive-otlp-grpc", addr: f.receive.grpcAddr, optional: true},
		listenFlag{flag: "--receive-otlp-http", addr: f.receive.httpAddr, optional: true}); err != nil {
		return nil, err
	}
	if plan.cert, err = loadCert(f.tlsCert, f.tlsKey); err != nil {
		return nil, err
	}

	cfg := f.cfg // a copy: Normalize fills defaults serve's proxy.New fills again
	if f.configPath != "" || f.cfg.Upstream != "" {
		if len(f.engineFlags) > 0 {
			return nil, fmt.Errorf("%s: flags of the embedded engine, which does not run with --upstream or --config; drop them, or run the engine alone (ttftlens engine)", strings.Join(f.engineFlags, ", "))
		}
		// The same variables configure "ttftlens engine", so a shared
		// environment may carry them: said, not refused.
		if vars := engineVars(os.Environ()); len(vars) > 0 {
			plan.log.Warn().Strs("variables", vars).Msg("ignored: the embedded engine does not run with --upstream or --config")
		}
	}
	switch {
	case f.configPath != "" && f.cfg.Upstream != "":
		return nil, fmt.Errorf("--upstream %q and --config %s: with --config the upstreams come from the config file's routes and pools; drop --upstream (or TTFTLENS_UPSTREAM)", f.cfg.Upstream, f.configPath)
	case f.configPath != "":
		if plan.gw, plan.configSum, err = loadGateway(f.configPath, &plan.log); err != nil {
			return nil, err
		}
		cfg.Gateway = plan.gw
	case f.cfg.Upstream != "":
		if err := checkUpstream(f.cfg.Upstream); err != nil {
			return nil, err
		}
	default:
		if err := checkEngine(f.engine); err != nil {
			return nil, err
		}
		plan.embedded = true
		cfg.Upstream = "http://127.0.0.1:1" // the embedded engine's place, known once it listens
	}
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}

	if exporters.OTLPEnabled(os.Getenv) { // OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set
		log := plan.log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn().Err(err).Msg("otlp trace export") }))
		if plan.traces, err = exporters.NewOTLPSink(context.Background(), exporters.OTLPOptions{ServiceVersion: readBuildInfo().Version}); err != nil {
			return nil, fmt.Errorf("otlp traces: %w", err)
		}
	}
	return plan, nil
}

// close releases what prepare made and serve did not take over.
func (p *servePlan) close() {
	if p.traces != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.traces.Close(ctx)
		p.traces = nil
	}
}

// describe says, for --check-config, what the checked flags will run.
func (p *servePlan) describe(w io.Writer, f *serveFlags) {
	var b strings.Builder
	switch {
	case p.gw != nil:
		c := p.gw.Snapshot().Config()
		fmt.Fprintf(&b, "flags ok; %s: ok (auth %s, %s, %s, %s)", f.configPath, c.Auth,
			count(len(c.Keys), "key"), count(len(c.Routes), "route"), count(len(c.Pools), "pool"))
	case p.embedded:
		b.WriteString("flags ok (no --config; upstream: the embedded reference engine)")
	default:
		fmt.Fprintf(&b, "flags ok (no --config; upstream %s)", f.cfg.Upstream)
	}
	if p.cert != nil {
		b.WriteString("; TLS certificate ok")
	}
	if exporters.OTLPEnabled(os.Getenv) {
		b.WriteString("; OTLP traces on")
	}
	if f.receive.on() {
		b.WriteString("; receiving engine spans")
	}
	fmt.Fprintln(w, b.String())
}

// count is "1 key" or "N keys".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// logLevels are the --log-level values.
var logLevels = []string{"debug", "info", "warn", "error"}

// parseLogLevel reads --log-level (zerolog's own parser accepts any word
// and warns on stderr instead of failing).
func parseLogLevel(s string) (zerolog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return zerolog.DebugLevel, nil
	case "info":
		return zerolog.InfoLevel, nil
	case "warn":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	}
	return zerolog.NoLevel, fmt.Errorf("--log-level %q: want one of %s", s, strings.Join(logLevels, ", "))
}

// engineKinds are the --engine values: auto and every kind the proxy reads.
func engineKinds() []string { return append([]string{proxy.EngineAuto}, engines.Kinds...) }

// checkEngineKind checks --engine against the same list its help shows.
func checkEngineKind(kind string) error {
	for _, k := range engineKinds() {
		if kind == k {
			return nil
		}
	}
	return fmt.Errorf("--engine %q: want one of %s", kind, strings.Join(engineKinds(), ", "))
}

// listenFlag is an address flag serve listens on.
type listenFlag struct {
	flag, addr string
	optional   bool // empty turns it off
}

// checkListen checks that each address is host:port and that no two
// share a port on addresses that overlap.
func checkListen(flags ...listenFlag) error {
	var addrs []*net.TCPAddr
	var named []listenFlag
	for _, a := range flags {
		if a.addr == "" {
			if a.optional {
				continue
			}
			return fmt.Errorf("%s: no address (want host:port, e.g. 127.0.0.1:9464 or :8080)", a.flag)
		}
		tcp, err := net.ResolveTCPAddr("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s %q: %w (want host:port, e.g. 127.0.0.1:9464 or :8080)", a.flag, a.addr, err)
		}
		for i, d := range addrs {
			overlap := tcp.IP == nil || d.IP == nil || tcp.IP.IsUnspecified() || d.IP.IsUnspecified() || tcp.IP.Equal(d.IP)
			if tcp.Port != 0 && tcp.Port == d.Port && overlap {
				return fmt.Errorf("%s %s and %s %s: both on port %d", named[i].flag, named[i].addr, a.flag, a.addr, tcp.Port)
			}
		}
		addrs, named = append(addrs, tcp), append(named, a)
	}
	return nil
}

// loadCert loads --tls-cert and --tls-key (nil, nil without them).
func loadCert(certFile, keyFile string) (*tls.Certificate, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together: give both, or neither")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return &cert, nil
}

// checkUpstream checks --upstream as the proxy will read it.
func checkUpstream(raw string) error {
	if !strings.Contains(raw, "://") {
		return fmt.Errorf("--upstream %q: no scheme; give the server's base URL, e.g. http://%s", raw, strings.TrimPrefix(raw, "//"))
	}
	_, err := proxy.UpstreamName(raw, "")
	return err
}

// engineVars returns the names of the TTFTLENS_ENGINE_* variables in env
// (TTFTLENS_ENGINE itself is serve's --engine).
func engineVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TTFTLENS_ENGINE_") {
			out = append(out, name)
		}
	}
	return out
}

// checkEngine checks the embedded engine's flags as refengine.New would,
// without building the model: its own validation (faults, a tokenizer
// without a model), the checkpoint's header and size, the ranks against
// the model's heads, and that the tokenizer file opens.
func checkEngine(cfg refengine.Config) error {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("embedded engine: %w", err)
	}
	shape := cfg.ModelConfig
	if cfg.ModelPath != "" {
		var err error
		if shape, err = model.CheckpointShape(cfg.ModelPath); err != nil {
			return fmt.Errorf("embedded engine: --engine-model: %w", err)
		}
	}
	if most := min(shape.KVHeads, 255); cfg.Ranks > most {
		return fmt.Errorf("embedded engine: --engine-ranks %d: the model has %d kv heads; want 1 to %d ranks", cfg.Ranks, shape.KVHeads, most)
	}
	if cfg.TokenizerPath != "" {
		f, err := os.Open(cfg.TokenizerPath)
		if err != nil {
			return fmt.Errorf("embedded engine: --engine-tokenizer: %w", err)
		}
		f.Close()
	}
	return nil
}
