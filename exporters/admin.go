package exporters

import (
	"bytes"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// NewRegistry returns a registry with the Go runtime and process
// collectors, ready for NewMetrics and AdminHandler.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// AdminHandler serves the admin listener:
//
//   - GET /metrics: the registry's series, negotiated between the Prometheus
//     text format, OpenMetrics (needed for exemplars; served when the
//     scraper's Accept header asks for it) and protobuf (which carries native
//     histograms), through promhttp.HandlerFor and fasthttpadaptor.
//   - GET /health: 200 "ok".
//   - any path in extra: that handler (it may replace the two above). A key
//     ending in "/*" is a prefix route: "/debug/requests/*" serves every
//     path that starts with "/debug/requests/"; an exact key wins over a
//     prefix, and a longer prefix over a shorter one.
//
// Other paths get 404. Gathering errors are logged nowhere and counted in
// promhttp_metric_handler_errors_total on reg; the series that could be
// gathered are still served.
func AdminHandler(reg *prometheus.Registry, extra map[string]fasthttp.RequestHandler) fasthttp.RequestHandler {
	metrics := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg,
	}))
	routes := make(map[string]fasthttp.RequestHandler, len(extra)+2)
	routes["/metrics"] = getOnly(metrics)
	routes["/health"] = getOnly(health)
	var prefixes []prefixRoute
	for path, h := range extra {
		if p, ok := strings.CutSuffix(path, "*"); ok && strings.HasSuffix(p, "/") {
			prefixes = append(prefixes, prefixRoute{[]byte(p), h})
			continue
		}
		routes[path] = h
	}
	slices.SortFunc(prefixes, func(a, b prefixRoute) int { return len(b.prefix) - len(a.prefix) })
	return func(ctx *fasthttp.RequestCtx) {
		if h, ok := routes[string(ctx.Path())]; ok { // no allocation for the lookup
			h(ctx)
			return
		}
		for _, p := range prefixes {
			if bytes.HasPrefix(ctx.Path(), p.prefix) {
				p.h(ctx)
				return
			}
		}
		ctx.Error("not found\n", fasthttp.StatusNotFound)
	}
}

type prefixRoute struct {
	prefix []byte
	h      fasthttp.RequestHandler
}

func health(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("ok\n")
}

func getOnly(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsGet() && !ctx.IsHead() {
			ctx.Response.Header.Set("Allow", "GET, HEAD")
			ctx.Error("method not allowed\n", fasthttp.StatusMethodNotAllowed)
			return
		}
		h(ctx)
	}
}
