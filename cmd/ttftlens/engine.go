package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ttftlens/ttftlens/refengine"
)

const engineHelp = `usage: ttftlens engine [flags]

Runs the reference CPU engine alone: an OpenAI-compatible server with vLLM's
metric names and fault injection (refengine/FAULTS.md; per request only with
--allow-faults). Every flag is also an environment variable: TTFTLENS_ENGINE_
and the name in upper case with - as _.

flags:
`

// runEngine runs the reference engine alone: "ttftlens engine".
func runEngine(args []string, std stdio) error {
	var cfg refengine.Config
	fs := newFlagSet("engine", engineHelp, "TTFTLENS_ENGINE_")
	listen := fs.String("listen", ":8000", "address for clients")
	fs.BoolVar(&cfg.AllowFaults, "allow-faults", false, "let requests inject faults with the X-Ttftlens-Fault header (refengine/FAULTS.md); off: the header is ignored")
	fs.StringVar(&cfg.SpanShape, "span-shape", "", "report timing as a stock engine does: nothing in the responses, one OpenTelemetry span per finished request shaped as "+strings.Join(refengine.SpanShapes, ", ")+"'s, sent to --otlp-traces-endpoint (empty: in the responses, PROTOCOL.md)")
	endpoint := fs.String("otlp-traces-endpoint", "", "with --span-shape, where the spans go, as vLLM's flag: OTLP/gRPC, or OTLP/HTTP with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf (then end it in /v1/traces)")
	cfg.RegisterFlags(fs.FlagSet)
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(std.err, &slog.HandlerOptions{ReplaceAttr: lowerLevel}))
	if (cfg.SpanShape == "") != (*endpoint == "") {
		return fmt.Errorf("--span-shape %q and --otlp-traces-endpoint %q: give both or neither", cfg.SpanShape, *endpoint)
	}
	if *endpoint != "" {
		tp, err := spanTracer(*endpoint)
		if err != nil {
			return err
		}
		defer tp.Shutdown(context.Background()) // sends what the batch holds
		cfg.Tracer = tp
	}
	srv, err := refengine.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1) // ours before the log says it serves
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	cfg.Logger.Info("reference engine serving", "listen", ln.Addr().String())
	select {
	case err = <-errc:
	case <-sig:
	}
	return err
}

// spanTracer sends the engine's spans to endpoint as vLLM does: OTLP/gRPC,
// or OTLP/HTTP when OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is http/protobuf; a
// host:port without a scheme is plain http.
func spanTracer(endpoint string) (*sdktrace.TracerProvider, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	var exp sdktrace.SpanExporter
	var err error
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") == "http/protobuf" {
		exp, err = otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	} else {
		exp, err = otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(endpoint))
	}
	if err != nil {
		return nil, fmt.Errorf("--otlp-traces-endpoint %s: %w", endpoint, err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp)), nil
}

// prefixedFlags registers fn's flags on fs under prefix, so "serve" can take
// the embedded engine's flags as --engine-NAME.
func prefixedFlags(fs *flag.FlagSet, prefix string, fn func(*flag.FlagSet)) {
	inner := flag.NewFlagSet("", flag.ContinueOnError)
	fn(inner)
	inner.VisitAll(func(f *flag.Flag) {
		fs.Var(f.Value, prefix+f.Name, fmt.Sprintf("embedded engine: %s", f.Usage))
	})
}

// startEmbeddedEngine runs the reference engine in this process on a
// loopback port and returns it and its base URL. Close stops it.
func startEmbeddedEngine(cfg refengine.Config) (*refengine.Server, string, error) {
	srv, err := refengine.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("embedded engine: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, "", err
	}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String(), nil
}
