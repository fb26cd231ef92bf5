package proxy

import (
	"strings"
	"testing"

	"github.com/ttftlens/ttftlens/record"
	"github.com/ttftlens/ttftlens/stages"
)

// TestUpstreamConnAndSendMarks: each record says which connection carried
// the request upstream; the proxy's marks of the hop come in order
// (admitted, upstream_connected, upstream_sent, then upstream_headers and
// first_token_arrived, both before first_token); and with an upstream that
// reports nothing, the proxy's own time (admitted to upstream_sent, and
// first_token_arrived to first_token_flushed) is in transport, not in
// unattributed.
func TestUpstreamConnAndSendMarks(t *testing.T) {
	const closing = "last on this connection"
	up := startUpstream(t, func(c *upConn) {
		if strings.Contains(c.body, closing) {
			c.headers(200, "text/event-stream", "Connection: close")
		}
		c.stream(1, 0)
	})
	addr, sink, _ := startProxy(t, up.url, nil)
	for _, tt := range []struct {
		name    string
		content string
		want    record.UpstreamConn
	}{
		{"first request: dialed", "hi", record.ConnNew},
		{"next: the pooled connection", "hi", record.ConnReused},
		{"the upstream closes it after this one", closing, record.ConnReused},
		{"after the close: dialed again", "hi", record.ConnNew},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Replace(chatBody, `"content":"hi"`, `"content":"`+tt.content+`"`, 1)
			if resp, _, err := post(t, addr, body); err != nil || resp.StatusCode != 200 {
				t.Fatalf("post: %v %v", resp, err)
			}
			r := sink.next(t)
			if r.UpstreamConn != tt.want {
				t.Errorf("upstream_conn %q, want %q", r.UpstreamConn, tt.want)
			}
			tl := &r.Timeline
			for _, order := range [][]stages.Mark{
				{stages.Admitted, stages.UpstreamConnected, stages.UpstreamSent, stages.UpstreamHeaders, stages.FirstToken},
				{stages.UpstreamSent, stages.FirstTokenArrived, stages.FirstToken},
			} {
				for i, m := range order[1:] {
					at, ok := tl.At(m)
					before, _ := tl.At(order[i])
					if !ok || at < before {
						t.Errorf("%s at %v (set %v), before %s at %v", m, at, ok, order[i], before)
					}
				}
			}
			admitted, _ := tl.At(stages.Admitted)
			sent, _ := tl.At(stages.UpstreamSent)
			arrived, _ := tl.At(stages.FirstTokenArrived)
			flushed, _ := tl.At(stages.FirstTokenFlushed)
			if want := (sent - admitted) + (flushed - arrived); !r.bd.Unsplit || r.bd.Stages[stages.Transport] != want {
				t.Errorf("transport %v (unsplit %v), want the send %v plus arrival to flush %v", r.bd.Stages[stages.Transport], r.bd.Unsplit, sent-admitted, flushed-arrived)
			}
		})
	}
}
