package web

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/ttftlens/ttftlens/internal/leaktest"

	"github.com/ttftlens/ttftlens/exporters"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.FasthttpSleepers...)
}

// TestAssets checks the page's routes: content types, the security
// headers, and that the HTML references only its own files.
func TestAssets(t *testing.T) {
	h := exporters.AdminHandler(prometheus.NewRegistry(), Routes(exporters.NewRing(exporters.RingOptions{})))
	tests := []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/ui", 200, "text/html; charset=utf-8"},
		{"HEAD", "/ui", 200, "text/html; charset=utf-8"},
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/ui/app.css", 200, "text/css; charset=utf-8"},
		{"POST", "/ui", 405, ""},
		{"GET", "/ui/nope.js", 404, ""},
		{"GET", "/debug/requests", 200, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(tt.method)
			ctx.Request.SetRequestURI(tt.path)
			h(&ctx)
			if got := ctx.Response.StatusCode(); got != tt.status {
				t.Fatalf("status %d, want %d", got, tt.status)
			}
			if tt.ctype != "" && string(ctx.Response.Header.ContentType()) != tt.ctype {
				t.Errorf("content type %q, want %q", ctx.Response.Header.ContentType(), tt.ctype)
			}
			if tt.status == 200 && strings.HasPrefix(tt.path, "/ui") && len(ctx.Response.Header.Peek("Content-Security-Policy")) == 0 {
				t.Error("no Content-Security-Policy")
			}
		})
	}
	html, _ := static.ReadFile("static/index.html")
	if bytes.Contains(html, []byte("http://")) || bytes.Contains(html, []byte("https://")) || bytes.Contains(html, []byte("<script>")) {
		t.Error("index.html references an external resource or has an inline script")
	}
}
