package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// shareYAML is what a least_ttft pool's replicas add to share their
// routing through the Redis server at ADDR, on CHANNEL.
const shareYAML = `quota_backend:
  kind: redis
  redis:
    address: ADDR
share_routing: redis
share_channel: CHANNEL
`

// poolConfig parses the configuration of a pool of the upstreams under the
// policy, its route held to slo (0: none). An error is the configuration
// refusing it.
func poolConfig(policy string, slo time.Duration, upstreams []string) (*gateway.Config, error) {
	return sharedConfig(policy, slo, upstreams, "", "")
}

// sharedConfig is poolConfig with, for a least_ttft pool and a Redis server
// at redisAddr (""; none), its routing shared on channel.
func sharedConfig(policy string, slo time.Duration, upstreams []string, redisAddr, channel string) (*gateway.Config, error) {
	y := strings.NewReplacer("POLICY", policy, "SLO", slo.String(), "UPSTREAMS", strings.Join(upstreams, ", ")).Replace(poolYAML)
	if redisAddr != "" && policy == gateway.PolicyLeastTTFT {
		y += strings.NewReplacer("ADDR", redisAddr, "CHANNEL", channel).Replace(shareYAML)
	}
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

// stack is the engines and the proxy replicas in front of them, in this
// process on loopback, with the proxies' records kept by request id.
type stack struct {
	engines []*refengine.Server
	// hosts are the engines' host:port, the records' upstream names.
	hosts    []string
	replicas []*replica
	recs     *recordSink
	wg       sync.WaitGroup
}

// replica is one proxy of the stack with a gateway of its own: its own
// prefix index, TTFT models and in-flight counts, as each replica of a
// Deployment has, sharing only the engines.
type replica struct {
	url   string // its base URL
	gw    *gateway.Gateway
	proxy *proxy.Proxy
	log   *exporters.LogSink // nil: its records are not written
}

// startStack starts an engine of each configuration and len(logs) proxy
// replicas (at least one) with them as one pool under the policy, its
// route held to slo (0: none); replica i writes its records to logs[i] as
// JSON lines when that is not nil. With redisAddr, a least_ttft pool's
// replicas share their routing through that Redis server.
func startStack(policy string, slo time.Duration, engines []refengine.Config, logs []io.Writer, redisAddr string) (_ *stack, err error) {
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
	if len(logs) == 0 {
		logs = []io.Writer{nil}
	}
	channel := "ttftlens:routing:" + strings.TrimPrefix(urls[0], "http://") // this run's alone
	for _, log := range logs {
		cfg, err := sharedConfig(policy, slo, urls, redisAddr, channel) // a config each: New fills it in
		if err != nil {
			return nil, err
		}
		r, err := s.startReplica(cfg, log)
		if r != nil {
			s.replicas = append(s.replicas, r)
		}
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startReplica starts a proxy with a gateway of cfg, writing its records
// to log when log is not nil. A replica returned with an error is to be
// closed.
func (s *stack) startReplica(cfg *gateway.Config, log io.Writer) (*replica, error) {
	r := &replica{}
	nop := zerolog.Nop()
	var err error
	if r.gw, err = gateway.New(cfg, gateway.Options{Log: &nop}); err != nil {
		return nil, err
	}
	r.gw.Start()
	// Every policy scrapes the engines alike, as least_load needs; the
	// engines are identified as serve does by default (the reference
	// engine's usage chunk, with its cached tokens, is then asked for).
	var sink record.Sink = s.recs
	if log != nil {
		r.log = exporters.NewLogSink(log, exporters.LogOptions{})
		sink = exporters.NewFanout(exporters.Named{Name: "facts", Sink: s.recs}, exporters.Named{Name: "log", Sink: r.log})
	}
	if r.proxy, err = proxy.New(proxy.Config{Gateway: r.gw, ScrapeEngineMetrics: proxy.DefaultLeastLoadScrape, Engine: proxy.EngineAuto}, sink, nop); err != nil {
		return r, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	r.url = "http://" + ln.Addr().String()
	p := r.proxy
	s.wg.Go(func() { _ = p.Serve(ln) })
	return r, nil
}

// url is the first replica's base URL: where the load is aimed (transport
// spreads it over them all).
func (s *stack) url() string { return s.replicas[0].url }

// transport is the load's transport: each request to the next replica in
// turn, as a balancer in front of a Deployment's replicas spreads them;
// nil (the probe's own) with one replica.
func (s *stack) transport() http.RoundTripper {
	if len(s.replicas) < 2 {
		return nil
	}
	t := &spread{base: &http.Transport{Proxy: nil, MaxIdleConns: 256, MaxIdleConnsPerHost: 64, DisableCompression: true, IdleConnTimeout: 30 * time.Second}}
	for _, r := range s.replicas {
		t.hosts = append(t.hosts, strings.TrimPrefix(r.url, "http://"))
	}
	return t
}

// spread is a RoundTripper sending each request to the next of hosts.
type spread struct {
	base  *http.Transport
	hosts []string
	n     atomic.Uint64
}

func (t *spread) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Host = t.hosts[t.n.Add(1)%uint64(len(t.hosts))]
	r.Host = r.URL.Host
	return t.base.RoundTrip(r)
}

// shutdownProxy stops the proxies, letting requests in flight finish for
// up to 10 s: once it returns, every request has its record, and every
// record is written. The engines go on, their truth still to be read.
func (s *stack) shutdownProxy() error {
	var err error
	for _, r := range s.replicas {
		if r.proxy == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = errors.Join(err, r.proxy.Shutdown(ctx))
		cancel()
		r.proxy = nil
		if r.log != nil {
			err = errors.Join(err, r.log.Close())
			r.log = nil
		}
	}
	return err
}

// close stops the proxy, then the engines.
func (s *stack) close() error {
	err := s.shutdownProxy()
	for _, r := range s.replicas {
		if r.gw != nil {
			r.gw.Stop()
		}
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
	// probe says it was routed as a probe (probe): under an SLO, past its
	// prediction, which was stale (or there was none).
	probe bool
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
		predicted: r.Predicted, prediction: r.PredictedTTFT(), predStages: r.Prediction, cachedExpected: r.CachedExpected, probe: r.Probe, refused: r.Detail == endreason.DetailSLOUnmeetable}
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
