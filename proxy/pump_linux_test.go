//go:build linux

package proxy

import (
	"strings"
	"testing"
)

// TestProxyWatchesUpstreamConns: the connections the proxy dials to its
// upstreams are registered with the watcher, which a stream needs to be
// relayed in a pump (upstreamBody.pumpable); without it every stream
// would quietly take the pull path, two reads an event.
func TestProxyWatchesUpstreamConns(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(3, 0) })
	addr, sink, p := startProxy(t, up.url, nil)
	if _, body, err := post(t, addr, chatBody); err != nil || !strings.Contains(body, "[DONE]") {
		t.Fatalf("stream: %v, %q", err, body)
	}
	sink.next(t)
	n := 0
	p.clients.Range(func(_, v any) bool {
		hc := v.(*upstream).hc
		cc, err := hc.AcquireConn(0, false) // the stream's connection, idle in the pool now
		if err != nil {
			t.Fatal(err)
		}
		defer hc.ReleaseConn(cc)
		n++
		body := upstreamBody{conn: cc.Conn()}
		if cc.LastUseTime().IsZero() || body.pumpable() == nil {
			t.Errorf("the stream's upstream connection (reused %v) cannot be pumped", !cc.LastUseTime().IsZero())
		}
		return true
	})
	if n != 1 {
		t.Fatalf("%d upstream pools, want 1", n)
	}
}
