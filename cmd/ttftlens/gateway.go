package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/ttftlens/ttftlens/engine"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
)

// runHashKey is "ttftlens hash-key": it reads a key from stdin (or the
// first argument) and prints the value for a config file's keys[].key, so
// the plain key never has to be written down.
func runHashKey(args []string) error {
	key := ""
	if len(args) > 0 {
		key = args[0]
	} else {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
		if err != nil {
			return err
		}
		key = strings.TrimSpace(string(b))
	}
	if key == "" {
		return fmt.Errorf("hash-key: no key on stdin")
	}
	fmt.Println(gateway.HashKey(key))
	return nil
}

// loadGateway reads the config file and builds the gateway from it.
func loadGateway(path string) (*gateway.Gateway, error) {
	cfg, err := gateway.Load(path)
	if err != nil {
		return nil, err
	}
	return gateway.New(cfg, gateway.Options{})
}

// checkConfig is --check-config: the flags were parsed already; validate
// their values and the config file, if any, as serve would, and say what
// they hold. Nothing is started.
func checkConfig(f *serveFlags) error {
	cfg := f.cfg
	if f.configPath != "" {
		gw, err := loadGateway(f.configPath)
		if err != nil {
			return err
		}
		cfg.Gateway = gw
	} else if cfg.Upstream == "" {
		cfg.Upstream = "http://127.0.0.1:0" // the embedded engine's place
	}
	if err := cfg.Normalize(); err != nil {
		return err
	}
	if cfg.Gateway == nil {
		fmt.Println("flags ok (no --config)")
		return nil
	}
	c := cfg.Gateway.Snapshot().Config()
	fmt.Printf("flags ok; %s: ok (auth %s, %d keys, %d routes, %d pools)\n", f.configPath, c.Auth, len(c.Keys), len(c.Routes), len(c.Pools))
	return nil
}

// reloadOnHUP reloads the config file on SIGHUP. Requests in flight keep
// the configuration they started with; a bad file changes nothing.
func reloadOnHUP(gw *gateway.Gateway, path string, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	for range hup {
		cfg, err := gateway.Load(path)
		if err == nil {
			err = gw.Reload(cfg)
		}
		if err != nil {
			log.Error().Err(err).Str("config", path).Msg("reload failed; keeping the running configuration")
			continue
		}
		log.Info().Str("config", path).Msg("configuration reloaded")
	}
}

// routeModels returns the exact model names of the routes (globs cannot be
// metric label values).
func routeModels(gw *gateway.Gateway) []string {
	var out []string
	for _, r := range gw.Snapshot().Config().Routes {
		if !strings.ContainsAny(r.Model, "*?") {
			out = append(out, r.Model)
		}
	}
	return out
}

// upstreamNames are the upstream label values the metrics accept.
func upstreamNames(cfg *proxy.Config) ([]string, error) {
	if cfg.Gateway == nil {
		up, err := proxy.NewUpstream(cfg.Upstream, cfg.UpstreamName, nil)
		if err != nil {
			return nil, err
		}
		return []string{up.Name}, nil
	}
	var out []string
	for _, p := range cfg.Gateway.Snapshot().Pools() {
		for _, u := range p.Upstreams {
			out = append(out, u.Name)
		}
	}
	return out, nil
}

// listen opens the client listener, with TLS when a certificate is given.
func listen(addr, certFile, keyFile string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || certFile == "" {
		return ln, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), nil
}

// engineMetrics serves the embedded engine's /metrics (vLLM's names) on the
// admin listener, since the engine itself listens on a private port.
func engineMetrics(srv *engine.Server) fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(http.StripPrefix("/engine", srv.Handler()))
}
