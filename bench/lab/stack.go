// Package lab runs the reference engine and the proxy in-process on
// loopback and drives them with the probe: the scenarios behind
// "ttftlens demo" and the proof suite (proof_test.go). Each cause of a slow
// first token is run twice, as a baseline and with the cause injected, and
// the diagnosis names the stage whose median grew the most.
package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
)

// StackConfig shapes a Stack.
type StackConfig struct {
	// Engine is the reference engine's configuration (faults from requests
	// are always on).
	Engine refengine.Config
	// Proxy adjusts the proxy's configuration (Upstream is set already, and
	// AllowFaults).
	Proxy func(*proxy.Config)
	// Log, when set, receives the proxy's JSON log lines.
	Log io.Writer
	// Sink, when set, receives every record after the ring.
	Sink record.Sink
	// Registry, when set, is what the admin listener serves at /metrics
	// (default: exporters.NewRegistry(), the Go and process collectors).
	Registry *prometheus.Registry
	// AdminRoutes, when set, returns the admin listener's routes besides
	// /metrics (default: the ring's own, /debug/requests).
	AdminRoutes func(*exporters.Ring) map[string]fasthttp.RequestHandler
}

// Stack is the reference engine and the proxy in front of it, on free
// loopback ports, with the ring of records on an admin listener, wired as
// "ttftlens serve" wires them.
type Stack struct {
	Engine *refengine.Server
	// EngineURL, URL and Admin are the base URLs of the engine, the proxy
	// and the proxy's admin listener.
	EngineURL, URL, Admin string
	// Ring holds the proxy's recent and slowest records.
	Ring *exporters.Ring

	proxy *proxy.Proxy
	admin *fasthttp.Server
	log   *exporters.LogSink
	flags *bufferingSink
	wg    sync.WaitGroup
}

// Start runs a stack. Close stops it.
func Start(cfg StackConfig) (*Stack, error) {
	s := &Stack{flags: &bufferingSink{m: map[string]record.Buffering{}}}
	// The lab injects its causes per request: faults on in the engine and
	// through the proxy.
	cfg.Engine.AllowFaults = true
	eng, err := refengine.New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	s.Engine = eng
	lns, err := listen(3)
	if err != nil {
		eng.Close()
		return nil, err
	}
	s.EngineURL = "http://" + lns[0].Addr().String()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = eng.Serve(lns[0]) }()

	pc := proxy.Config{Upstream: s.EngineURL, UpstreamName: "embedded-engine", AllowFaults: true}
	if cfg.Proxy != nil {
		cfg.Proxy(&pc)
	}
	ring := exporters.NewRing(exporters.RingOptions{})
	s.Ring = ring
	sinks := record.Sinks{ring, s.flags}
	if cfg.Log != nil {
		s.log = exporters.NewLogSink(cfg.Log, exporters.LogOptions{})
		sinks = append(sinks, s.log)
	}
	if cfg.Sink != nil {
		sinks = append(sinks, cfg.Sink)
	}
	p, err := proxy.New(pc, sinks, zerolog.Nop())
	if err != nil {
		lns[1].Close()
		lns[2].Close()
		s.closeEngine()
		return nil, err
	}
	s.proxy = p
	reg, routes := cfg.Registry, ring.Routes()
	if reg == nil {
		reg = exporters.NewRegistry()
	}
	reg.MustRegister(gateway.NewCollector(p.Gateway(), p.UpstreamLabel))
	if cfg.AdminRoutes != nil {
		routes = cfg.AdminRoutes(ring)
	}
	s.admin = &fasthttp.Server{Handler: exporters.AdminHandler(reg, routes), Name: "ttftlens-admin"}
	s.URL = "http://" + lns[1].Addr().String()
	s.Admin = "http://" + lns[2].Addr().String()
	s.wg.Add(2)
	go func() { defer s.wg.Done(); _ = p.Serve(lns[1]) }()
	go func() { defer s.wg.Done(); _ = s.admin.Serve(lns[2]) }()
	return s, nil
}

func listen(n int) ([]net.Listener, error) {
	var out []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, err
		}
		out = append(out, ln)
	}
	return out, nil
}

func (s *Stack) closeEngine() {
	s.Engine.Close()
	s.wg.Wait()
}

// Close stops the proxy (letting requests in flight finish for up to 5 s),
// the admin listener and the engine.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.proxy.Shutdown(ctx)
	err = errors.Join(err, s.admin.ShutdownWithContext(ctx))
	s.closeEngine()
	if s.log != nil {
		err = errors.Join(err, s.log.Close())
	}
	return err
}

// Buffering returns the buffering signs the proxy recorded for a request
// (the admin endpoint's JSON may not carry them).
func (s *Stack) Buffering(id string) record.Buffering {
	s.flags.mu.Lock()
	defer s.flags.mu.Unlock()
	return s.flags.m[id]
}

// bufferingSink keeps the buffering signs of the records that have any.
type bufferingSink struct {
	mu sync.Mutex
	m  map[string]record.Buffering
}

func (b *bufferingSink) Emit(r *record.Record) {
	if r.Buffering == 0 {
		return
	}
	b.mu.Lock()
	b.m[r.RequestID] = r.Buffering
	b.mu.Unlock()
}

// BufferingProxy is a reverse proxy that holds each response whole before
// sending it: downstream buffering (a middlebox between the client and
// ttftlens), invisible from inside ttftlens.
type BufferingProxy struct {
	// URL is its base URL.
	URL string

	srv    *http.Server
	client *http.Client
	done   chan struct{}
}

// StartBufferingProxy runs a buffering proxy in front of target.
func StartBufferingProxy(target string) (*BufferingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	b := &BufferingProxy{URL: "http://" + ln.Addr().String(), client: &http.Client{Transport: tr}, done: make(chan struct{})}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		resp, err := b.client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, err := io.ReadAll(resp.Body) // the buffering: all of it, then send
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.Header().Del("Transfer-Encoding")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(b.done); _ = b.srv.Serve(ln) }()
	return b, nil
}

// Close stops the proxy and its connections.
func (b *BufferingProxy) Close() error {
	err := b.srv.Close()
	<-b.done
	b.client.CloseIdleConnections()
	return err
}
