package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/refengine"
	"github.com/ttftlens/ttftlens/stages"
)

// poolYAML is the gateway configuration of every run: the reference
// model's route to one pool of the engines, under the policy, with the
// route's TTFT SLO (0s: none).
const poolYAML = `routes:
  - model: ttftlens-ref
    pool: engines
    ttft_slo: SLO
pools:
  - name: engines
    policy: POLICY
    upstreams: [UPSTREAMS]
`

// poolConfig parses the configuration of a pool of the upstreams under the
// policy, its route held to slo (0: none). An error is the configuration
// refusing it.
func poolConfig(policy string, slo time.Duration, upstreams []string) (*gateway.Config, error) {
	y := strings.NewReplacer("POLICY", policy, "SLO", slo.String(), "UPSTREAMS", strings.Join(upstreams, ", ")).Replace(poolYAML)
	return gateway.Parse([]byte(y), "routing.yaml")
}

// checkPolicies returns an error naming the first policy the gateway's
// configuration refuses for a pool (a misspelt -policies).
func checkPolicies(policies []string) error {
	placeholders := []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}
	for _, p := range policies {
		if _, err := poolConfig(p, 0, placeholders); err != nil {
			return fmt.Errorf("-policies: %q: %w", p, err)
		}
	}
	return nil
}

// stack is the engines and the proxy in front of them, in this process on
// loopback, with the proxy's records kept by request id.
type stack struct {
	engines []*refengine.Server
	// hosts are the engines' host:port, the records' upstream names.
	hosts []string
	url   string // the proxy's base URL
	gw    *gateway.Gateway
	proxy *proxy.Proxy
	recs  *recordSink
	log   *exporters.LogSink // nil: the records are not written
	wg    sync.WaitGroup
}

// startStack starts an engine of each configuration and the proxy with
// them as one pool under the policy, its route held to slo (0: none),
// writing its records to log as JSON lines when log is not nil.
func startStack(policy string, slo time.Duration, engines []refengine.Config, log io.Writer) (_ *stack, err error) {
	s := &stack{recs: &recordSink{m: map[string]recordFacts{}}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	var urls []string
	for _, cfg := range engines {
		eng, err := refengine.New(cfg)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			eng.Close()
			return nil, err
		}
		s.engines = append(s.engines, eng)
		s.hosts = append(s.hosts, ln.Addr().String())
		urls = append(urls, "http://"+ln.Addr().String())
		s.wg.Go(func() { _ = eng.Serve(ln) })
	}
	cfg, err := poolConfig(policy, slo, urls)
	if err != nil {
		return nil, err
	}
	nop := zerolog.Nop()
	if s.gw, err = gateway.New(cfg, gateway.Options{Log: &nop}); err != nil {
		return nil, err
	}
	s.gw.Start()
	// Every policy scrapes the engines alike, as least_load needs; the
	// engines are identified as serve does by default (the reference
	// engine's usage chunk, with its cached tokens, is then asked for).
	var sink record.Sink = s.recs
	if log != nil {
		s.log = exporters.NewLogSink(log, exporters.LogOptions{})
		sink = exporters.NewFanout(exporters.Named{Name: "facts", Sink: s.recs}, exporters.Named{Name: "log", Sink: s.log})
	}
	if s.proxy, err = proxy.New(proxy.Config{Gateway: s.gw, ScrapeEngineMetrics: proxy.DefaultLeastLoadScrape, Engine: proxy.EngineAuto}, sink, nop); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	p := s.proxy
	s.wg.Go(func() { _ = p.Serve(ln) })
	return s, nil
}

// shutdownProxy stops the proxy, letting requests in flight finish for up
// to 10 s: once it returns, every request has its record. The engines go
// on, their truth still to be read.
func (s *stack) shutdownProxy() error {
	if s.proxy == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.proxy.Shutdown(ctx)
	s.proxy = nil
	if s.log != nil { // every record is in: written out
		err = errors.Join(err, s.log.Close())
		s.log = nil
	}
	return err
}

// close stops the proxy, then the engines.
func (s *stack) close() error {
	err := s.shutdownProxy()
	if s.gw != nil {
		s.gw.Stop()
	}
	for _, e := range s.engines {
		err = errors.Join(err, e.Close())
	}
	s.wg.Wait()
	return err
}

// engineOf returns the index of the engine a record's upstream name (its
// host:port) names, or -1.
func (s *stack) engineOf(upstream string) int {
	for i, h := range s.hosts {
		if upstream == h {
			return i
		}
	}
	return -1
}

// truth returns the engines' own account of a request: its prompt tokens
// and how many of them its engine's prefix cache served.
func (s *stack) truth(id string) (prompt, cached int, ok bool) {
	for _, e := range s.engines {
		if t, found := e.Truth(id); found {
			return t.PromptTokens, t.CachedTokens, true
		}
	}
	return 0, 0, false
}

// recordFacts is what the benchmark keeps of a record.
type recordFacts struct {
	upstream string
	// ok says a first token reached the client, so stages holds the split
	// and ttft the proxy's TTFT.
	ok     bool
	stages [stages.NumStages]time.Duration
	ttft   time.Duration
	// predicted says the request was routed with a prediction, predicted
	// (its TTFT: predicted_ttft_ms; its stages: predicted_stages_ms).
	predicted  bool
	prediction time.Duration
	predStages [stages.NumStages]time.Duration
	// cachedExpected is the prompt tokens the prediction took as cached
	// (cached_tokens_expected).
	cachedExpected int
	// refused says it was refused for its TTFT SLO.
	refused bool
}

// recordSink keeps the facts of every record by request id.
type recordSink struct {
	mu sync.Mutex
	m  map[string]recordFacts
}

func (k *recordSink) Emit(r *record.Record) {
	bd := r.Breakdown()
	f := recordFacts{upstream: r.Upstream, ok: bd.OK, stages: bd.Stages, ttft: bd.TTFT,
		predicted: r.Predicted, prediction: r.PredictedTTFT(), predStages: r.Prediction, cachedExpected: r.CachedExpected, refused: r.Detail == endreason.DetailSLOUnmeetable}
	k.mu.Lock()
	k.m[r.RequestID] = f
	k.mu.Unlock()
}

func (k *recordSink) get(id string) (recordFacts, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, ok := k.m[id]
	return f, ok
}
