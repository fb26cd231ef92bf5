// Package refengine is ttftlens' reference CPU engine server: an
// OpenAI-compatible model server over net/http in front of the pure-Go
// transformer of package refengine/model, with a continuous-batching scheduler,
// a tokenizer worker pool, media fetch, vLLM-named Prometheus metrics, the
// Server-Timing protocol of PROTOCOL.md, and fault injection (FAULTS.md).
//
// It knows the ground truth of every request (Truth), which makes it the
// judge of whether a proxy attributes time to first token correctly.
package refengine

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttftlens/ttftlens/internal/sock"
	"github.com/ttftlens/ttftlens/refengine/model"
)

// Server is a running reference engine. Create it with New, serve its
// Handler (or call Serve), and Close it when done.
type Server struct {
	cfg    Config
	faults atomic.Pointer[Faults] // server-wide: Config.Faults, then SetFaults

	m     *model.Model
	tok   model.Tokenizer
	pool  *model.BlockPool
	sched *scheduler
	toks  *tokenizerPool
	media *mediaFetcher
	met   *metrics
	truth *truthStore
	mux   *http.ServeMux

	created   int64 // unix seconds of start, the "created" of /v1/models
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // the scheduler goroutine
	handlers  sync.WaitGroup // generation handlers in flight

	mu   sync.Mutex
	srvs []*http.Server
}

// New builds (or loads) the model, starts the scheduler and the tokenizer
// workers, and returns a Server ready to serve.
func New(cfg Config) (*Server, error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	faults, _ := ParseFaults(cfg.Faults) // validated above

	var (
		m   *model.Model
		tok model.Tokenizer
		err error
	)
	if cfg.ModelPath != "" {
		m, err = model.LoadCheckpoint(cfg.ModelPath, cfg.Ranks)
		if err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
		if cfg.TokenizerPath != "" {
			tok, err = model.LoadTokenizer(cfg.TokenizerPath, m.Cfg.Vocab)
			if err != nil {
				m.Close()
				return nil, fmt.Errorf("load tokenizer: %w", err)
			}
		}
	} else {
		m, err = model.NewSeeded(cfg.ModelConfig, cfg.Seed, cfg.Ranks)
		if err != nil {
			return nil, fmt.Errorf("build model: %w", err)
		}
	}
	if tok == nil {
		tok = model.DefaultTokenizer(m.Cfg)
	}
	if cfg.KVBlocks <= 0 {
		// Enough for one full-length sequence beside a full batch of short
		// ones, and never less than 8192 tokens.
		cfg.KVBlocks = max(8192/model.BlockSize, (m.Cfg.MaxSeq+model.BlockSize-1)/model.BlockSize+cfg.MaxRunning)
	}

	s := &Server{
		cfg:     cfg,
		m:       m,
		tok:     tok,
		pool:    m.NewBlockPool(cfg.KVBlocks),
		truth:   newTruthStore(cfg.TruthCapacity),
		media:   newMediaFetcher(cfg.MediaTimeout, cfg.MediaMaxBytes),
		created: time.Now().Unix(),
		closing: make(chan struct{}),
	}
	s.faults.Store(&faults)
	s.met = newMetrics(cfg.ModelName, s.pool.Total(), s.kvUsage)
	if s.sched, err = newScheduler(m, s.pool, &cfg, tok.EOS(), faults, s.met); err != nil {
		m.Close()
		return nil, fmt.Errorf("start the scheduler: %w", err)
	}
	s.toks = newTokenizerPool(tok, cfg.TokenizerWorkers)
	s.wg.Go(s.sched.run)

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.track(w, r, true) })
	s.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.track(w, r, false) })
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.Handle("GET /metrics", s.met.handler())
	return s, nil
}

// track runs a generation handler, refusing new ones once Close began and
// letting Close wait for those in flight.
func (s *Server) track(w http.ResponseWriter, r *http.Request, chat bool) {
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "engine is shutting down", typ: "server_error"})
		return
	default:
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()
	s.generate(w, r, chat)
}

// Config returns the normalized configuration in use.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the HTTP handler of the API. Unknown paths get an
// OpenAI-shaped 404.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ac := requestConn(r); ac != nil {
			defer ac.rearm(r)
		}
		h, pattern := s.mux.Handler(r)
		if pattern == "" {
			writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path), typ: "invalid_request_error", code: "not_found"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Serve serves the API on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 30 * time.Second, ConnContext: withArrivalConn}
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		ln.Close()
		return nil
	default:
	}
	s.srvs = append(s.srvs, srv)
	s.mu.Unlock()
	sock.StampListener(ln)
	err := srv.Serve(arrivalListener{ln})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// SetFaults replaces the server-wide faults (Config.Faults' syntax; ""
// for none) for the requests that arrive from now on: an engine that slows
// down, or recovers, while it runs. A request's own X-Ttftlens-Fault still
// overrides them when AllowFaults.
func (s *Server) SetFaults(spec string) error {
	f, err := ParseFaults(spec)
	if err != nil {
		return err
	}
	s.faults.Store(&f)
	return nil
}

// Close stops the servers started by Serve, ends every unfinished request
// (finish reason error: streams get an error event), waits for the
// generation handlers in flight, stops the scheduler and the workers, and
// releases the model. No goroutine of the Server survives it; servers other
// than those of Serve should be shut down first (their handlers are waited
// for too). Close is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.closing)
		srvs := s.srvs
		s.srvs = nil
		s.mu.Unlock()
		for _, srv := range srvs {
			_ = srv.Close()
		}
		s.sched.close()
		s.wg.Wait()
		s.toks.close()
		s.handlers.Wait()
		s.media.close()
		s.m.Close()
	})
	return nil
}

// Truth returns the ground truth of a recent request by its X-Request-Id.
func (s *Server) Truth(requestID string) (Truth, bool) { return s.truth.get(requestID) }

// Counters returns the number of requests aborted because their client left
// and the number of tokens generated after a client had left.
func (s *Server) Counters() (aborted, tokensAfterClientLeft int64) {
	return s.met.aborted.Load(), s.met.tokensAfterGone.Load()
}

// KVBlocks returns the free and total blocks of the KV cache as of the last
// scheduler step.
func (s *Server) KVBlocks() (free, total int) {
	return int(s.sched.kvFree.Load()), s.pool.Total()
}

// kvUsage is the fraction of KV blocks in use as of the last scheduler step
// (vllm:kv_cache_usage_perc).
func (s *Server) kvUsage() float64 {
	free, total := s.KVBlocks()
	if total == 0 {
		return 0
	}
	return 1 - float64(free)/float64(total)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	b := append([]byte(nil), `{"object":"list","data":[{"id":`...)
	b = appendJSONString(b, s.cfg.ModelName)
	b = append(b, `,"object":"model","created":`...)
	b = appendInt(b, int(s.created))
	b = append(b, `,"owned_by":`...)
	b = appendJSONString(b, s.ownedBy())
	b = append(b, `,"root":`...)
	b = appendJSONString(b, s.cfg.ModelName)
	b = append(b, `,"max_model_len":`...)
	b = appendInt(b, s.m.Cfg.MaxSeq)
	b = append(b, "}]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	if s.cfg.SpanShape == SpanTGI {
		w.Header().Set("X-Compute-Type", "cpu") // as TGI's responses carry it
	}
	_, _ = w.Write(b)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.closing:
		writeError(w, &apiError{status: http.StatusServiceUnavailable, msg: "engine is shutting down", typ: "server_error"})
	default:
		w.WriteHeader(http.StatusOK)
	}
}
