package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
)

// TestHeartbeats checks keep-alive comments during upstream silence: before
// the first event (the response then starts early) and between events; an
// event the upstream sends in pieces still reaches the client whole; none
// when the option is off.
func TestHeartbeats(t *testing.T) {
	up := startUpstream(t, func(c *upConn) {
		c.sse()
		time.Sleep(250 * time.Millisecond) // silent prefill
		c.role()
		time.Sleep(250 * time.Millisecond) // silence between events
		c.chunk(`data: {"choices":[{"index":0,"delta":{"con`)
		time.Sleep(250 * time.Millisecond) // silence inside an event
		c.chunk(`tent":"hi"}}]}` + "\n\n")
		c.finish("stop")
		c.done()
		c.end()
	})
	for _, hb := range []time.Duration{0, 80 * time.Millisecond} {
		t.Run("heartbeat="+hb.String(), func(t *testing.T) {
			addr, sink, _ := startProxy(t, up.url, func(c *Config) { c.Heartbeat = hb })
			resp, body, err := post(t, addr, chatBody)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %d", err, resp.StatusCode)
			}
			r := sink.next(t)
			if r.Reason != endreason.Stop {
				t.Errorf("record %s/%s", r.Reason, r.Detail)
			}
			blocks := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
			var kinds []string
			for _, b := range blocks {
				switch {
				case b == ": keep-alive":
					kinds = append(kinds, "hb")
				case strings.Contains(b, `"content":"hi"`):
					kinds = append(kinds, "hi")
				case strings.Contains(b, `"role"`):
					kinds = append(kinds, "role")
				default:
					kinds = append(kinds, "other")
				}
			}
			got := strings.Join(kinds, " ")
			if hb == 0 {
				if strings.Contains(got, "hb") {
					t.Errorf("heartbeats while off: %s", got)
				}
				return
			}
			// Heartbeats before the role event and between role and "hi"
			// (also while "hi" arrives in pieces: the client is between
			// whole events then).
			before, afterRole, _ := strings.Cut(got, "role")
			between, _, _ := strings.Cut(afterRole, "hi")
			if strings.Count(before, "hb") < 2 || strings.Count(between, "hb") < 2 {
				t.Errorf("blocks %q: want >= 2 heartbeats before the first event and between events", got)
			}
			if intact := `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n"; !strings.Contains(body, intact) {
				t.Errorf("the event the upstream split was not delivered whole: %q", body)
			}
		})
	}
}
