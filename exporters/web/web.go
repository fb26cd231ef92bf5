// Package web is the requests page of the admin listener: the recent and
// the slowest requests, each drawn as a waterfall on its own clock, the
// p50/p95 stage breakdown and the end reasons, updated live from the
// ring's JSON endpoints (exporters.Ring.Routes).
//
// The page is three static files embedded in the binary (HTML, CSS and
// vanilla JavaScript drawing SVG): no build step, no external resources.
package web

import (
	"embed"
	"maps"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/exporters"
)

//go:embed static
var static embed.FS

// The page's paths.
const (
	PagePath = "/ui"
	RootPath = "/"
)

var assets = []struct {
	path, file, contentType string
}{
	{RootPath, "static/index.html", "text/html; charset=utf-8"},
	{PagePath, "static/index.html", "text/html; charset=utf-8"},
	{PagePath + "/app.js", "static/app.js", "text/javascript; charset=utf-8"},
	{PagePath + "/app.css", "static/app.css", "text/css; charset=utf-8"},
}

// csp allows only the page's own files and fetches to its own origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Routes returns the admin routes for the page ("/", "/ui" and its two
// assets) together with ring's JSON routes, for exporters.AdminHandler's
// extra map.
func Routes(ring *exporters.Ring) map[string]fasthttp.RequestHandler {
	routes := ring.Routes()
	maps.Copy(routes, PageRoutes())
	return routes
}

// PageRoutes returns the page's routes alone. The page reads
// /debug/requests from the same origin.
func PageRoutes() map[string]fasthttp.RequestHandler {
	routes := make(map[string]fasthttp.RequestHandler, len(assets))
	for _, a := range assets {
		body, err := static.ReadFile(a.file)
		if err != nil {
			panic("web: missing embedded " + a.file) // a build defect
		}
		ct := a.contentType
		routes[a.path] = func(ctx *fasthttp.RequestCtx) {
			if !ctx.IsGet() && !ctx.IsHead() {
				ctx.Response.Header.Set("Allow", "GET, HEAD")
				ctx.Error("method not allowed\n", fasthttp.StatusMethodNotAllowed)
				return
			}
			h := &ctx.Response.Header
			h.SetContentType(ct)
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Content-Security-Policy", csp)
			ctx.SetBody(body)
		}
	}
	return routes
}
