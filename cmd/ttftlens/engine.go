package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

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
	cfg.RegisterFlags(fs.FlagSet)
	if err := fs.parse(args, std); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(std.err, &slog.HandlerOptions{ReplaceAttr: lowerLevel}))
	srv, err := refengine.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	cfg.Logger.Info("reference engine serving", "listen", ln.Addr().String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err = <-errc:
	case <-sig:
	}
	return err
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
