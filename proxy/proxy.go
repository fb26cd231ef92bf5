// Package proxy is the streaming reverse proxy: the fasthttp server, the
// upstream client, and the relay that times every event on the request's
// clock and records why each request ended.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/proxy/engines"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/sse"
	"github.com/ttftlens/ttftlens/stages"
)

// Config is the proxy's configuration. Zero values take the documented
// defaults (see Normalize).
type Config struct {
	// Gateway decides auth, quotas, validation, routing and admission.
	// Nil means a pass-through gateway built from Upstream: no keys, every
	// model to that one upstream, no admission queue.
	Gateway *gateway.Gateway
	// Upstream is the base URL of the model server when Gateway is nil,
	// e.g. http://127.0.0.1:8000.
	Upstream string
	// UpstreamName labels that upstream in records and metrics (default:
	// its host:port).
	UpstreamName string
	// FirstTokenTimeout bounds the time from receipt to the first token
	// (default 120s; negative = none).
	FirstTokenTimeout time.Duration
	// TotalTimeout bounds the whole request (default DefaultTotalTimeout;
	// negative = none).
	TotalTimeout time.Duration
	// IdleTimeout bounds the time without generated content after the first
	// token (default 60s; negative = none). Comments and events without
	// content (pings, keep-alives) do not reset it.
	IdleTimeout time.Duration
	// ClientWriteStall bounds how long a client may take no bytes of a
	// stream before the proxy gives up on it: the request ends as the
	// client's doing (client_cancel, client_write_stall) and its upstream
	// is closed (default 60s, as nginx's send_timeout; negative = none). A
	// blocked write fails between half of it and all of it after the
	// client stopped reading.
	ClientWriteStall time.Duration
	// StallThreshold is the inter-token gap counted as a stall (default 1s).
	StallThreshold time.Duration
	// MaxEventBytes bounds one upstream SSE event (default 1 MiB).
	MaxEventBytes int
	// MaxBodyBytes bounds a request body and a non-streamed upstream
	// response body (default DefaultMaxBodyBytes). A request body over it
	// is answered 413 without being read.
	MaxBodyBytes int
	// MaxUpstreamHeaderBytes bounds an upstream response's status line and
	// headers (default 16 KiB, at least 1 KiB). It is the size of the read
	// buffer each upstream exchange holds while it reads them.
	MaxUpstreamHeaderBytes int
	// MaxBodyMemory bounds the bytes the bodies of the requests in flight
	// hold together (default DefaultMaxBodyMemory, or MaxBodyBytes when that
	// is larger; never below MaxBodyBytes); a stream lets go of its body at
	// its first event. A body counts with its Content-Length, a chunked one
	// with the body limit until it is read. A request whose body would go
	// over it is answered 503 with Retry-After, its body unread.
	MaxBodyMemory int
	// MaxBodyMemoryPerKey bounds the part of MaxBodyMemory the bodies
	// under one API key hold together (default a quarter of it, at least
	// MaxBodyBytes; negative: no share), so one key's slow bodies cannot
	// keep every other key's out. A request whose body would go over it is
	// answered 503 with Retry-After, its body unread. Requests without a
	// key (auth none or passthrough) have no share.
	MaxBodyMemoryPerKey int
	// MaxHeaderBytes bounds a request's line and headers together (default
	// DefaultMaxHeaderBytes). Each client connection holds a read buffer of
	// this size, except while its response streams (detach.go). A longer
	// head is answered 431.
	MaxHeaderBytes int
	// MaxConns bounds the client connections open at once (default
	// MaxConnsFor the process's open-file limit; negative: none);
	// MaxConnsPerClient those from one IP address (default
	// DefaultMaxConnsPerClient; negative: none). A connection over a cap
	// is answered as it is accepted (503, or 429 for the client's own cap)
	// and closed; open ones are not touched.
	MaxConns          int
	MaxConnsPerClient int
	// ReadTimeout bounds reading a request, its head and its body, from its
	// first byte (default 60s, as nginx's client_header_timeout and
	// client_body_timeout; a connection's first byte must come within it
	// too). A body not sent in time is answered 408 and recorded
	// (request_body_timeout).
	ReadTimeout time.Duration
	// Engine is the kind of engine behind the upstreams, which decides how
	// its timing signals are read: one of engines.Kinds, or EngineAuto to
	// identify each upstream from what it serves. Empty means generic (the
	// OpenAI fields, and what a response says of its own engine:
	// engines.GenericReader; the reference engine's Server-Timing is always
	// read).
	Engine string
	// AllowBreakdown lets a client ask for its own TTFT breakdown with the
	// X-Ttftlens-Breakdown request header: a Server-Timing trailer (header,
	// for a non-streamed response) and a closing SSE comment. Off by
	// default; with a Gateway, its keys decide instead.
	AllowBreakdown bool
	// AllowFaults passes the clients' fault-injection headers
	// (engines.OperatorHeaders) to the upstream. Off by default, they are
	// stripped: a fault one client injects slows every request the engine
	// serves.
	AllowFaults bool
	// ScrapeEngineMetrics is how often each upstream's /metrics is polled
	// (default DefaultEngineScrape; negative: not polled), from the moment
	// the configuration naming it is in effect: every record carries the
	// engine's waiting and running counts at routing time (vLLM, SGLang,
	// TGI and llama.cpp gauge names), a queue seen where it cannot be
	// measured per request, and EngineWaste gets the engine's counts of
	// work for clients that had left. The upstreams of least_load pools
	// are polled at DefaultLeastLoadScrape unless it is positive (then at
	// its interval), even when it is negative.
	ScrapeEngineMetrics time.Duration
	// EngineWaste, when set, receives what each scraped engine counts of
	// its work for clients that had left.
	EngineWaste EngineWaste
	// Heartbeat, when positive, sends an SSE comment after that much upstream
	// silence, at event boundaries only, for clients behind load balancers
	// with idle timeouts. A heartbeat before the first event starts the
	// response early, so a failure after it cuts the stream instead of
	// answering with an error. Off by default.
	Heartbeat time.Duration
	// CompressStreams compresses event streams to clients that accept it:
	// CompressGzip or CompressZstd, one flush per event. Empty: off.
	CompressStreams string
	// PassEngineTiming forwards the engine's Server-Timing header and in-band
	// timing comments to the client instead of consuming them.
	PassEngineTiming bool
	// Clock is the requests' clock, their deadline timers' and
	// identification's retries', and the gateway's built from Upstream
	// (default clock.Real). Tests pass a *clock.Fake; the marks taken from
	// the kernel's receive timestamps (first_token_arrived) stay on the
	// machine's time.
	Clock clock.Clock
	// Tracker, when set, is told when each request starts and ends (the
	// in-flight gauge).
	Tracker Tracker
	// Refusals, when set, counts what is refused before a record can
	// exist: request heads that could not be read, connections over a cap.
	Refusals Refusals
	// ConnDiscards, when set, counts the pooled upstream connections
	// closed because something arrived on them that no request asked for.
	ConnDiscards ConnDiscards
}

// DefaultTotalTimeout bounds a request's life when Config.TotalTimeout is
// zero: long enough for a long generation (32k tokens at 20 tokens/s take
// 27 minutes, after a first token within the 2-minute default), short
// enough that an endless stream does not hold an upstream slot for good.
const DefaultTotalTimeout = 30 * time.Minute

// Tracker follows requests in flight.
type Tracker interface {
	RequestStarted()
	RequestEnded()
}

// Refusals counts what the proxy refuses before a request has a record.
type Refusals interface {
	RequestRefused(endreason.Refusal)
	ConnectionRefused(endreason.Refusal)
}

// ConnDiscards counts the upstream connections the pool closed instead of
// using again. It is called from any goroutine.
type ConnDiscards interface {
	UpstreamConnDiscarded(endreason.ConnDiscard)
}

// The defaults of the client-facing limits.
const (
	// DefaultMaxBodyBytes holds a chat request with media: base64 (4/3 of
	// the file) leaves about 6 MiB for images or audio, e.g. four 1.5 MB
	// photos, and text up to about a million tokens (some 4 bytes each).
	// Larger media belong in URLs.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMaxBodyMemory is 32 bodies of the largest size at once, and
	// thousands of ordinary chat requests (a few KiB each).
	DefaultMaxBodyMemory = 256 << 20
	// DefaultMaxHeaderBytes leaves room for a long bearer token (a JWT
	// with claims can pass 4 KiB) besides the usual headers.
	DefaultMaxHeaderBytes = 8 << 10
	// DefaultMaxConns keeps the connections' buffers and goroutines to
	// a few hundred MiB. The default cap is lower when the open-file limit
	// is (MaxConnsFor).
	DefaultMaxConns = 10000
	// FileReserve is the open files MaxConnsFor keeps for other than
	// client streams: the listeners, the disconnect watcher, the admin
	// endpoints' clients, health probes, metrics scrapes, Redis, the log.
	FileReserve = 128
	// DefaultMaxConnsPerClient is more streams than a few engines serve at
	// once; a load balancer that funnels every client through one address
	// needs it raised or turned off.
	DefaultMaxConnsPerClient = 1000
	// minHeaderBytes is the smallest MaxHeaderBytes: a request line and
	// the headers every client sends.
	minHeaderBytes = 1 << 10
)

// MaxConnsFor is the default connection cap under a limit of fileLimit
// open files: two descriptors per proxied stream (the client's connection
// and its upstream's), after FileReserve, at most DefaultMaxConns, at
// least 1; DefaultMaxConns when the limit is not known (0).
func MaxConnsFor(fileLimit uint64) int {
	switch {
	case fileLimit == 0:
		return DefaultMaxConns
	case fileLimit < FileReserve+2:
		return 1
	}
	return int(min((fileLimit-FileReserve)/2, DefaultMaxConns))
}

// Normalize fills defaults and rejects contradictions.
func (c *Config) Normalize() error {
	if c.Upstream == "" && c.Gateway == nil {
		return errors.New("no upstream: give --upstream URL or --config FILE")
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0
		}
	}
	def(&c.FirstTokenTimeout, 120*time.Second)
	def(&c.TotalTimeout, DefaultTotalTimeout)
	def(&c.IdleTimeout, 60*time.Second)
	def(&c.StallThreshold, time.Second)
	def(&c.ClientWriteStall, 60*time.Second)
	switch {
	case c.MaxEventBytes < 0:
		return fmt.Errorf("--max-event-bytes %d: negative (0 means the default)", c.MaxEventBytes)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("--max-body-bytes %d: negative (0 means the default)", c.MaxBodyBytes)
	case c.MaxUpstreamHeaderBytes < 0 || c.MaxUpstreamHeaderBytes > 0 && c.MaxUpstreamHeaderBytes < minUpstreamHeaderBytes:
		return fmt.Errorf("--max-upstream-header-bytes %d: under %d (0 means the default)", c.MaxUpstreamHeaderBytes, minUpstreamHeaderBytes)
	case c.MaxBodyMemory < 0:
		return fmt.Errorf("--max-body-memory %d: negative (0 means the default)", c.MaxBodyMemory)
	case c.ReadTimeout < 0:
		return fmt.Errorf("read timeout %v: negative (0 means the default)", c.ReadTimeout)
	case c.MaxHeaderBytes < 0:
		return fmt.Errorf("--max-header-bytes %d: negative (0 means the default)", c.MaxHeaderBytes)
	case c.Heartbeat < 0:
		return fmt.Errorf("--heartbeat %v: negative (0 means off)", c.Heartbeat)
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = sse.DefaultLimit
	}
	// 0 takes the default; a negative connection cap means none (the
	// other limits refused negatives above).
	defInt := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	defInt(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	defInt(&c.MaxBodyMemory, max(DefaultMaxBodyMemory, c.MaxBodyBytes))
	defInt(&c.MaxBodyMemoryPerKey, max(c.MaxBodyMemory/4, c.MaxBodyBytes))
	defInt(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	if c.MaxConns == 0 {
		files, _ := sock.FileLimit() // 0 when not known
		c.MaxConns = MaxConnsFor(files)
	}
	defInt(&c.MaxConns, DefaultMaxConns)
	defInt(&c.MaxConnsPerClient, DefaultMaxConnsPerClient)
	switch {
	case c.MaxBodyMemory < c.MaxBodyBytes:
		return fmt.Errorf("--max-body-memory %d below --max-body-bytes %d: a body of the largest size could never be read", c.MaxBodyMemory, c.MaxBodyBytes)
	case c.MaxBodyMemoryPerKey > 0 && (c.MaxBodyMemoryPerKey < c.MaxBodyBytes || c.MaxBodyMemoryPerKey > c.MaxBodyMemory):
		return fmt.Errorf("--max-body-memory-per-key %d: not between --max-body-bytes %d and --max-body-memory %d", c.MaxBodyMemoryPerKey, c.MaxBodyBytes, c.MaxBodyMemory)
	case c.MaxHeaderBytes < minHeaderBytes:
		return fmt.Errorf("--max-header-bytes %d: under %d, too small for a request line and the usual headers", c.MaxHeaderBytes, minHeaderBytes)
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = defaultReadTimeout
	}
	if c.MaxUpstreamHeaderBytes == 0 {
		c.MaxUpstreamHeaderBytes = defaultUpstreamHeaderBytes
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	switch c.CompressStreams {
	case "", CompressGzip, CompressZstd:
	default:
		return fmt.Errorf("--compress-streams %q: want gzip or zstd", c.CompressStreams)
	}
	if c.Engine != "" && c.Engine != EngineAuto {
		if _, err := engines.NewReader(c.Engine); err != nil {
			return fmt.Errorf("--engine: %w", err)
		}
	}
	return nil
}

// Proxy serves clients and forwards to the upstreams the gateway picks.
type Proxy struct {
	cfg        Config
	gw         *gateway.Gateway
	ownGW      bool     // gw was built here from Config.Upstream: started and stopped here
	clients    sync.Map // upstream base URL → *upstream (connection pool)
	sink       record.Sink
	log        zerolog.Logger
	clock      stages.Clock
	watcher    *sock.Watcher
	conns      sync.Map // client net.Conn → *clientConn, from accept to close
	heads      sync.Map // *fasthttp.RequestHeader → *headNote: the head check's (frontdoor.go)
	headSeq    atomic.Uint64
	pool       sync.Pool
	bgMu       sync.Mutex     // orders goBackground against Shutdown's stop
	background sync.WaitGroup // engine-load scrapers and engine identification, stopped by stop
	stop       context.CancelFunc
	stopCtx    context.Context
	bodies     bodyBudget         // the memory request bodies hold
	bodyLate   *gateway.Rejection // the answer to a body not sent within cfg.ReadTimeout
	limits     *connLimits        // nil: no connection cap
	server     *fasthttp.Server
	liveMu     sync.Mutex
	live       map[*exchange]struct{} // requests between begin and their record, for a shutdown's cut
	// Detached streams (detach.go): their client connections, which
	// fasthttp no longer counts, and those given back to it after a stream.
	detached  sync.Map // client net.Conn → *handoff, from the hijack to the handoff
	closing   atomic.Bool
	contMu    sync.Mutex     // orders nextRequest and Serve against Shutdown's closing
	listeners []net.Listener // Serve's, for Shutdown to close; under contMu
	continued sync.WaitGroup // connections given back to fasthttp by nextRequest
}

// New builds a proxy that hands every finished request's record to sink.
// log receives operational messages (not request records).
func New(cfg Config, sink record.Sink, log zerolog.Logger) (*Proxy, error) {
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	gw, own := cfg.Gateway, false
	if gw == nil {
		var err error
		if gw, err = gateway.New(passThrough(&cfg), gateway.Options{Log: &log, Clock: cfg.Clock}); err != nil {
			return nil, err
		}
		own = true
	}
	w, err := sock.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("client disconnect watcher: %w", err)
	}
	if own {
		gw.Start()
	}
	p := &Proxy{cfg: cfg, gw: gw, ownGW: own, sink: sink, log: log, clock: requestClock(cfg.Clock), watcher: w, live: map[*exchange]struct{}{}}
	p.stopCtx, p.stop = context.WithCancel(context.Background())
	p.pool.New = func() any { return newExchange(p) }
	p.bodies.limit, p.bodies.perKey = int64(cfg.MaxBodyMemory), int64(cfg.MaxBodyMemoryPerKey)
	p.bodyLate = bodyTimeout(cfg.ReadTimeout)
	p.limits = newConnLimits(cfg.MaxConns, cfg.MaxConnsPerClient)
	p.server = &fasthttp.Server{
		Handler:      p.Handler(),
		ErrorHandler: p.refuseRequest,
		Name:         "ttftlens",
		// The head alone decides 401 and 413, before fasthttp reads any
		// of the body or sends 100 Continue (checkHead). The handler
		// reads the body itself, within the body memory budget
		// (readBody); fasthttp reads the head and at most the body's
		// first 8 KiB.
		HeaderReceived:               p.checkHead,
		StreamRequestBody:            true,
		KeepHijackedConns:            true, // a detached stream's connection is given back for the next request
		DisablePreParseMultipartForm: true, // forwarded as sent, never parsed
		MaxRequestBodySize:           cfg.MaxBodyBytes,
		ReadBufferSize:               cfg.MaxHeaderBytes,
		ReadTimeout:                  cfg.ReadTimeout, // reading a request, not writing the stream
		IdleTimeout:                  120 * time.Second,
		CloseOnShutdown:              true,
		SecureErrorLogMessage:        true, // fasthttp's errors never quote the request
		Logger:                       fasthttpLogger{log},
		ConnState:                    p.connState,
	}
	gw.Watch(p.upstreamsInEffect)
	gw.WatchProbes(p.upstreamUp)
	return p, nil
}

// LogConnCap logs the connection cap in effect (max_conns, 0: none) and
// the open-file limit, with a warning when the limit cannot hold the
// cap's streams: past it, accepting waits (retryingListener) and upstream
// connections fail. serve logs it at start.
func (p *Proxy) LogConnCap() {
	log, maxConns := p.log, p.cfg.MaxConns
	files, _ := sock.FileLimit()
	ev := log.Info()
	msg := "client connection cap"
	if files > 0 && (maxConns == 0 || uint64(maxConns) > (max(files, FileReserve)-FileReserve)/2) {
		ev = log.Warn()
		msg = "client connection cap over what the open-file limit holds (two per stream, " +
			strconv.Itoa(FileReserve) + " kept): raise ulimit -n or lower --max-conns"
	}
	ev.Int("max_conns", maxConns).Uint64("open_file_limit", files).Msg(msg)
}

// defaultReadTimeout bounds reading a request, head and body.
const defaultReadTimeout = 60 * time.Second

// Serve accepts clients on ln until Shutdown, within the connection caps;
// an accept error that passes (no file descriptor free) is waited out
// (retryingListener), any other one is returned. It returns nil once
// Shutdown has begun, also when Shutdown began first: ln is closed then.
func (p *Proxy) Serve(ln net.Listener) error {
	ln = newRetryingListener(sock.RawListener(ln), p.cfg.Clock, p.log)
	if p.limits != nil {
		ln = &cappedListener{Listener: ln, limits: p.limits, refusals: p.cfg.Refusals}
	}
	// fasthttp's Shutdown closes only the listeners its Serve has taken,
	// and a Serve that takes one after it accepts until the process ends:
	// Shutdown closes those it finds here too, and a Serve that comes
	// after it accepts nothing.
	p.contMu.Lock()
	if p.closing.Load() {
		p.contMu.Unlock()
		return ln.Close()
	}
	p.listeners = append(p.listeners, ln)
	p.contMu.Unlock()
	p.goBackground(p.sweepHeads)
	return p.server.Serve(ln)
}

// goBackground runs f in a goroutine Shutdown waits for; once the proxy
// stopped it runs nothing (f must return when stopCtx ends).
func (p *Proxy) goBackground(f func()) {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.stopCtx.Err() != nil {
		return
	}
	p.background.Add(1)
	go func() {
		defer p.background.Done()
		f()
	}()
}

// ErrGraceCut is Shutdown's error when ctx ended with requests in flight,
// which it cut.
var ErrGraceCut = errors.New("shutdown grace over")

// Shutdown stops accepting, waits for in-flight requests until ctx ends,
// and stops the watcher. Requests still in flight when ctx ends are cut
// (end reason deadline, detail shutdown), so each still ends in its
// record; Shutdown returns once those records are emitted (or after
// cutWait more) and reports how many it cut in the error (ErrGraceCut).
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.contMu.Lock()
	p.closing.Store(true) // a stream ending from now on closes its connection
	listeners := p.listeners
	p.listeners = nil
	p.contMu.Unlock()
	for _, ln := range listeners {
		_ = ln.Close() // fasthttp closes them again: retryingListener's Close is idempotent
	}
	err := p.server.ShutdownWithContext(ctx)
	if err == nil {
		err = p.waitStreams(ctx) // fasthttp does not count detached streams
	}
	if err != nil {
		if n := p.cut(); n > 0 {
			err = fmt.Errorf("%w: cut %d requests in flight", ErrGraceCut, n)
		} else {
			err = nil // the last ones ended as the grace ran out
		}
	}
	p.closeConns()
	p.waitGivenBack()
	if p.InFlight() > 0 {
		// A given-back connection started a request after the waits
		// above looked; its connection is closed now: it ends here.
		p.cut()
	}
	p.bgMu.Lock()
	p.stop()
	p.bgMu.Unlock()
	p.background.Wait()
	p.watcher.Close()
	if p.ownGW {
		p.gw.Stop()
	}
	p.clients.Range(func(_, v any) bool {
		v.(*upstream).hc.CloseIdleConnections()
		return true
	})
	return err
}

// cutWait bounds each step of a shutdown's cut: the wait for the aborted
// requests' records, then, for requests blocked writing to a client that
// does not read, the wait after their client connections are closed.
const cutWait = 2 * time.Second

// cut aborts every request in flight with errShutdown: their upstream
// connections close, so the engines stop, and each request ends in its
// record. A request blocked writing to its client is ended by closing the
// client's connection. It returns how many requests it cut.
func (p *Proxy) cut() int {
	p.liveMu.Lock()
	n := len(p.live)
	for x := range p.live {
		x.ctl.abort(x.gen, errShutdown)
	}
	p.liveMu.Unlock()
	if !p.waitLive(cutWait) {
		p.liveMu.Lock()
		for x := range p.live {
			if c := x.client.conn; c != nil {
				_ = c.Close()
			}
		}
		p.liveMu.Unlock()
		p.waitLive(cutWait)
	}
	return n
}

// closeConns closes the client connections left at a shutdown's end:
// fasthttp serves open connections again once its shutdown returned, and
// a connection a stream gave back (nextRequest) may have come after it
// looked. No request starts after this.
func (p *Proxy) closeConns() {
	p.conns.Range(func(c, _ any) bool {
		_ = c.(net.Conn).Close()
		return true
	})
}

// waitGivenBack waits for the connections streams gave back to fasthttp
// (nextRequest) to end, once closeConns closed them; a request one started
// may wait on its upstream, which a closed client connection does not
// end: every cutWait, what is in flight is cut.
func (p *Proxy) waitGivenBack() {
	done := make(chan struct{})
	go func() {
		p.continued.Wait()
		close(done)
	}()
	tick := time.NewTicker(cutWait)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			p.cut()
		}
	}
}

// waitStreams waits until ctx ends for the streams fasthttp handed over to
// end in their records.
func (p *Proxy) waitStreams(ctx context.Context) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// waitLive waits up to d for every request in flight to end in its record.
func (p *Proxy) waitLive(d time.Duration) bool {
	for end := time.Now().Add(d); p.InFlight() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			p.log.Warn().Int64("requests", p.InFlight()).Msg("shutdown: requests still in flight after the cut")
			return false
		}
	}
	return true
}

// requestClock is c as a request clock: stages.Monotonic itself for the
// real clock, which spares every mark an indirect call.
func requestClock(c clock.Clock) stages.Clock {
	if c == clock.Real {
		return stages.Monotonic
	}
	return func() int64 { return int64(c.Now()) }
}

// passThrough is the gateway of a proxy without a config file: no keys, every
// model (and any path) to the one upstream, no admission queue, never ejected.
func passThrough(c *Config) *gateway.Config {
	return &gateway.Config{
		Auth:         gateway.AuthNone,
		MaxBodyBytes: c.MaxBodyBytes,
		KeyDefaults:  gateway.KeyDefaults{AllowBreakdown: c.AllowBreakdown},
		Routes:       []gateway.RouteConfig{{Model: "*", Pool: "default"}},
		Pools: []gateway.PoolConfig{{
			Name:      "default",
			Upstreams: []string{c.Upstream},
			Ejection:  gateway.EjectionConfig{ConsecutiveFailures: -1},
		}},
	}
}

// client returns the connection pool for a gateway upstream.
func (p *Proxy) client(u *gateway.Upstream) (*upstream, error) {
	if c, ok := p.clients.Load(u.URL); ok {
		return c.(*upstream), nil
	}
	c, err := newUpstream(u.URL, p.UpstreamLabel(u), p.cfg.MaxUpstreamHeaderBytes, p.watcher)
	if err != nil {
		return nil, err
	}
	c.discards = p.cfg.ConnDiscards
	actual, loaded := p.clients.LoadOrStore(u.URL, c)
	if c = actual.(*upstream); !loaded {
		p.startScrape(c, u.URL)
		switch p.cfg.Engine {
		case EngineAuto:
			p.detectEngine(c, u.URL)
		case "":
		default:
			c.kind.set(p.cfg.Engine)
		}
	}
	return c, nil
}

// Gateway returns the proxy's gateway (for reloads and metrics).
func (p *Proxy) Gateway() *gateway.Gateway { return p.gw }

// InFlight returns the requests between receipt and their record.
func (p *Proxy) InFlight() int64 {
	p.liveMu.Lock()
	defer p.liveMu.Unlock()
	return int64(len(p.live))
}

// UpstreamLabel is the name an upstream has in records and metrics.
func (p *Proxy) UpstreamLabel(u *gateway.Upstream) string {
	if p.ownGW && p.cfg.UpstreamName != "" {
		return p.cfg.UpstreamName
	}
	return u.Name
}

// started counts a request in flight.
func (p *Proxy) started(x *exchange) {
	p.liveMu.Lock()
	p.live[x] = struct{}{}
	p.liveMu.Unlock()
	if t := p.cfg.Tracker; t != nil {
		t.RequestStarted()
	}
}

// ended counts a request out and emits its record: last, so a sink that
// panics cannot skip the rest.
func (p *Proxy) ended(x *exchange) {
	if t := p.cfg.Tracker; t != nil {
		t.RequestEnded()
	}
	defer func() {
		p.liveMu.Lock()
		delete(p.live, x)
		p.liveMu.Unlock()
	}()
	p.sink.Emit(&x.fin.rec)
}

func (p *Proxy) acquire() *exchange { return p.pool.Get().(*exchange) }

func (p *Proxy) release(x *exchange) {
	p.bodies.give(x.client.bodyKey, x.client.bodyHeld)
	x.reset()
	p.pool.Put(x)
}

// clientConn is what the proxy keeps of a client connection.
type clientConn struct {
	watch *sock.ConnWatch // its disconnect registration
	began atomic.Uint64   // Proxy.headSeq when its current request's first byte came; 0: none yet
}

// requestBegan is c's clientConn.began, 0 for a connection it does not know.
func (p *Proxy) requestBegan(c net.Conn) uint64 {
	if v, ok := p.conns.Load(c); ok {
		return v.(*clientConn).began.Load()
	}
	return 0
}

// connState registers each client connection with the disconnect watcher
// once, when accepted, and ends the registration when fasthttp is done with
// it (StateClosed comes after the close, which drops the socket from the
// epoll set by itself); then the connection no longer counts against the
// caps. It marks where each request begins (StateActive: its first byte
// came), for the head check's notes.
func (p *Proxy) connState(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		p.conns.Store(c, &clientConn{watch: p.watcher.WatchConn(c)})
	case fasthttp.StateActive:
		if v, ok := p.conns.Load(c); ok {
			v.(*clientConn).began.Store(p.headSeq.Add(1))
		}
	case fasthttp.StateIdle:
		if p.cfg.ClientWriteStall > 0 {
			// The response is written: a stream's write stall deadline
			// (relay.armStall) must not reach the connection's next one.
			_ = c.SetWriteDeadline(time.Time{})
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		if st == fasthttp.StateHijacked && p.hijackedConn(c) {
			return // a detached stream's: the registration and the cap go on with it
		}
		if st == fasthttp.StateClosed {
			p.neverDetached(c)
		}
		if v, ok := p.conns.LoadAndDelete(c); ok {
			p.watcher.EndConn(v.(*clientConn).watch)
		}
		// fasthttp sends no StateClosed after a hijack: a hijacked
		// connection other than a detached stream's (a lingering close of
		// at most lingerTime) leaves the caps here.
		if p.limits != nil {
			p.limits.leave(c)
		}
	}
}

// fasthttpLogger sends fasthttp's own messages (mostly aborted connections,
// which records already account for) to the debug level.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug().Msgf(format, args...)
}

// Listen opens the TCP listener Serve takes: its clients' connections get
// TCP keep-alive from the listening socket (sock.Listen).
func Listen(addr string) (net.Listener, error) { return sock.Listen(addr) }
