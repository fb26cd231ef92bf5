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

	"github.com/prometheus/client_golang/prometheus"
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

// checkConfig is --check-config: validate and say what the file holds.
func checkConfig(path string) error {
	if path == "" {
		return fmt.Errorf("--check-config needs --config FILE")
	}
	cfg, err := gateway.Load(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok (auth %s, %d keys, %d routes, %d pools)\n", path, cfg.Auth, len(cfg.Keys), len(cfg.Routes), len(cfg.Pools))
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

// gatewayCollector exports the gateway's per-upstream state at scrape time:
// admission queue depth, requests in flight, health and ejection. Upstreams
// come from the current configuration, so a reload shows at the next scrape.
type gatewayCollector struct {
	gw    *gateway.Gateway
	label func(*gateway.Upstream) string // the upstream's name in records and metrics
}

var (
	queueDepthDesc = prometheus.NewDesc("ttftlens_queue_depth", "Requests waiting in the upstream's admission queue.", []string{"upstream"}, nil)
	upInFlightDesc = prometheus.NewDesc("ttftlens_upstream_in_flight", "Requests holding one of the upstream's admission slots.", []string{"upstream"}, nil)
	upHealthyDesc  = prometheus.NewDesc("ttftlens_upstream_healthy", "1 when the upstream is healthy and not ejected.", []string{"upstream"}, nil)
)

func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- upInFlightDesc
	ch <- upHealthyDesc
}

func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.gw.Snapshot().Pools() {
		for _, u := range p.Upstreams {
			healthy := 0.0
			if u.Healthy() && !u.Ejected() {
				healthy = 1
			}
			name := c.label(u)
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(u.QueueDepth()), name)
			ch <- prometheus.MustNewConstMetric(upInFlightDesc, prometheus.GaugeValue, float64(u.InFlight()), name)
			ch <- prometheus.MustNewConstMetric(upHealthyDesc, prometheus.GaugeValue, healthy, name)
		}
	}
}
