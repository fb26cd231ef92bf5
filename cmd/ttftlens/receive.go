package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/receiver"
	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/spanjoin"
)

// receiveFlags are serve's flags for receiving the engines' spans.
type receiveFlags struct {
	grpcAddr, httpAddr string
	maxBytes           int
	wait               time.Duration
	maxWaiting         int
}

func (f *receiveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.grpcAddr, "receive-otlp-grpc", "", "receive the engines' trace spans over OTLP/gRPC at this address (convention: 127.0.0.1:4317), and join each request's span to its record (empty: off)")
	fs.StringVar(&f.httpAddr, "receive-otlp-http", "", "receive the engines' trace spans over OTLP/HTTP (protobuf or JSON, at /v1/traces) at this address (convention: 127.0.0.1:4318) (empty: off)")
	fs.IntVar(&f.maxBytes, "receive-otlp-max-bytes", receiver.DefaultMaxRequestBytes, "largest OTLP export request received, compressed or not (larger: RESOURCE_EXHAUSTED, 413)")
	fs.DurationVar(&f.wait, "receive-otlp-wait", spanjoin.DefaultWait, "with a receiver, how long a finished request's record waits for its engine's span before it is written unsplit (engine_span_missing); the client never waits")
	fs.IntVar(&f.maxWaiting, "receive-otlp-max-waiting", spanjoin.DefaultMaxWaiting, "records waiting for their engine's span at once; more are written unsplit at once (engine_span_missing: full)")
}

func (f *receiveFlags) on() bool { return f.grpcAddr != "" || f.httpAddr != "" }

// spanReceiver is the receiving end of the engines' spans: the joiner in
// front of the record sinks, and the servers feeding it.
type spanReceiver struct {
	joiner *spanjoin.Joiner
	grpc   *grpc.Server
	http   *http.Server
	addrs  [2]net.Addr // where gRPC and HTTP listen (nil: off)
	once   sync.Once
}

// startReceiver listens on the receiver's addresses and serves them,
// joining spans to the records sinks gets and forwarding them to traces
// (nil: not forwarded). It returns the sink the proxy writes records to.
func startReceiver(f *receiveFlags, sinks record.Sink, traces *exporters.OTLPSink, reg *prometheus.Registry, log *zerolog.Logger) (*spanReceiver, error) {
	r := &spanReceiver{}
	r.joiner = spanjoin.New(sinks, spanjoin.Options{Wait: f.wait, MaxWaiting: f.maxWaiting, Log: log})
	consumers := receiver.Consumers{r.joiner}
	if traces != nil {
		consumers = append(consumers, receiver.ConsumerFunc(traces.Forward))
		reg.MustRegister(traces)
	}
	rcv := receiver.New(consumers, receiver.Options{MaxRequestBytes: f.maxBytes})
	reg.MustRegister(rcv, r.joiner)
	var lns []net.Listener
	for _, addr := range []string{f.grpcAddr, f.httpAddr} {
		if addr == "" {
			lns = append(lns, nil)
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				if l != nil {
					l.Close()
				}
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	if ln := lns[0]; ln != nil {
		r.addrs[0] = ln.Addr()
		r.grpc = rcv.GRPCServer()
		go func() {
			if err := r.grpc.Serve(ln); err != nil {
				log.Error().Err(err).Msg("OTLP/gRPC receiver stopped")
			}
		}()
		log.Info().Str("listen", ln.Addr().String()).Msg("receiving engine spans over OTLP/gRPC")
	}
	if ln := lns[1]; ln != nil {
		r.addrs[1] = ln.Addr()
		r.http = &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
		go func() {
			if err := r.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Msg("OTLP/HTTP receiver stopped")
			}
		}()
		log.Info().Str("listen", ln.Addr().String()).Str("path", receiver.TracesPath).Msg("receiving engine spans over OTLP/HTTP")
	}
	return r, nil
}

// pending wraps GET /debug/requests/{id}: a record still waiting for its
// engine's span is answered 202 with Retry-After, so that a client joining
// records (ttftlens bench) keeps asking rather than taking it for lost.
func (r *spanReceiver) pending(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	prefix := strings.TrimSuffix(exporters.RequestsPrefix, "*")
	return func(ctx *fasthttp.RequestCtx) {
		id, ok := strings.CutPrefix(string(ctx.Path()), prefix)
		if ok && r.joiner.Waits(id) {
			ctx.Response.Header.Set("Retry-After", "1")
			ctx.SetContentType("application/json")
			ctx.SetStatusCode(fasthttp.StatusAccepted)
			ctx.SetBodyString(`{"request_id":` + strconv.Quote(id) + `,"status":"waiting for its engine's span"}`)
			return
		}
		next(ctx)
	}
}

// stop writes every waiting record (joining the spans that come while it
// waits, until ctx ends), then stops receiving.
func (r *spanReceiver) stop(ctx context.Context) { r.once.Do(func() { r.shut(ctx) }) }

func (r *spanReceiver) shut(ctx context.Context) {
	r.joiner.Close(ctx)
	if r.grpc != nil {
		stopped := make(chan struct{})
		go func() {
			r.grpc.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			r.grpc.Stop()
			<-stopped
		}
	}
	if r.http != nil {
		if r.http.Shutdown(ctx) != nil {
			r.http.Close()
		}
	}
}
