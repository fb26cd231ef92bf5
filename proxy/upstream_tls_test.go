package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/record"
)

// TestHTTPSUpstream relays streams from an https upstream: fasthttp wraps
// the counted connection in TLS, and the arrival count still works through
// it (a natural stream is not flagged, a held-back one is).
func TestHTTPSUpstream(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fl.Flush() // headers now: chunked, not a Content-Length
		held := r.Header.Get("X-Held") != ""
		var all strings.Builder
		for i := range 12 {
			ev := fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			if held {
				all.WriteString(ev)
				continue
			}
			fmt.Fprint(w, ev)
			fl.Flush()
			time.Sleep(2 * time.Millisecond)
		}
		all.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		fmt.Fprint(w, all.String())
	}))
	defer up.Close()
	addr, sink, p := startProxy(t, up.URL, nil)
	// Trust the test server's certificate: the proxy's pool for this
	// upstream, made before the first request would make its own.
	c, err := newUpstream(up.URL, "", defaultUpstreamHeaderBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	c.hc.TLSConfig = &tls.Config{RootCAs: roots}
	p.clients.Store(up.URL, c)

	for _, tt := range []struct {
		name string
		hdr  []string
		want record.Buffering
	}{
		{"natural", nil, 0},
		{"held back", []string{"X-Held", "1"}, record.BufferedBurst | record.BufferedLateFirst},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := post(t, addr, chatBody, tt.hdr...); err != nil {
				t.Fatal(err)
			}
			r := sink.next(t)
			if r.Reason != endreason.Stop || r.Stream.ContentEvents != 12 {
				t.Fatalf("record %s/%s (%s), %d content events", r.Reason, r.Detail, r.Error, r.Stream.ContentEvents)
			}
			if r.Buffering != tt.want {
				t.Errorf("buffering %v, want %v (%d arrivals)", r.Buffering.Kinds(), tt.want.Kinds(), r.Stream.Arrivals)
			}
		})
	}
}
