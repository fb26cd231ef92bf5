package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/refengine"
)

const hashKeyHelp = `usage: ttftlens hash-key [KEY]

Prints the value for a config file's keys[].key: "sha256:" and the hex
SHA-256 of the key, so the plain key never has to be written down. The key
is read from stdin (surrounding white space trimmed) unless given as the
argument ("-": stdin); a key that starts with '-' goes after "--".

  echo -n "$KEY" | ttftlens hash-key
`

// runHashKey is "ttftlens hash-key": it reads a key from stdin (or the
// argument) and prints the value for a config file's keys[].key.
func runHashKey(args []string, std stdio) error {
	if len(args) > 0 {
		switch a := args[0]; {
		case isHelp(a):
			fmt.Fprint(std.out, hashKeyHelp)
			return flag.ErrHelp
		case a == "--":
			args = args[1:]
		case a == "-" && len(args) == 1:
			args = nil // stdin
		case strings.HasPrefix(a, "-"):
			return usagef("hash-key", "unknown flag %s (hash-key takes no flags; to hash a key that starts with '-', give it after -- or on stdin)", a)
		}
	}
	if len(args) > 1 {
		return usagef("hash-key", "%d arguments: give one key, or none to read it from stdin", len(args))
	}
	key := ""
	if len(args) == 1 {
		key = args[0]
		if key == "" {
			return usagef("hash-key", "the key is empty")
		}
	} else {
		b, err := io.ReadAll(io.LimitReader(std.in, 4096))
		if err != nil {
			return err
		}
		if key = strings.TrimSpace(string(b)); key == "" {
			return usagef("hash-key", "no key on stdin")
		}
	}
	fmt.Fprintln(std.out, gateway.HashKey(key))
	return nil
}

// loadGateway reads the config file and builds the gateway from it; log
// gets its operational messages (upstream health transitions). sum is the
// SHA-256 of the content it read.
func loadGateway(path string, log *zerolog.Logger) (gw *gateway.Gateway, sum [32]byte, err error) {
	cfg, sum, err := readConfig(path)
	if err != nil {
		return nil, sum, err
	}
	gw, err = gateway.New(cfg, gateway.Options{Log: log})
	return gw, sum, err
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
		name, err := proxy.UpstreamName(cfg.Upstream, cfg.UpstreamName)
		if err != nil {
			return nil, err
		}
		return []string{name}, nil
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
func listen(addr string, cert *tls.Certificate) (net.Listener, error) {
	ln, err := proxy.Listen(addr)
	if err != nil || cert == nil {
		return ln, err
	}
	return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}), nil
}

// engineMetrics serves the embedded engine's /metrics (vLLM's names) on the
// admin listener, since the engine itself listens on a private port.
func engineMetrics(srv *refengine.Server) fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(http.StripPrefix("/engine", srv.Handler()))
}
