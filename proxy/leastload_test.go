package proxy

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/refengine"
)

const leastLoadYAML = `
routes:
  - model: ttftlens-ref
    pool: p
pools:
  - name: p
    upstreams: [UP_A, UP_B]
    policy: POLICY
`

func refChat(maxTokens string) string {
	return `{"model":"ttftlens-ref","stream":true,"max_tokens":` + maxTokens + `,"ignore_eos":true,"messages":[{"role":"user","content":"hi"}]}`
}

// mustWait waits up to 10 s for cond, then fails saying what did not happen.
func mustWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("within 10s: %s", what)
		}
	}
}

// busyEngine keeps an engine with one running slot busy from outside the
// proxy (as another replica would): one long request running, one waiting.
// It returns the connections; closing them ends the load.
func busyEngine(t *testing.T, url string) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	running, br := rawClient(t, addr, refChat("1900"))
	readUntil(t, br, `"content"`)
	waiting, _ := rawClient(t, addr, refChat("1900"))
	return []net.Conn{running, waiting}
}

// TestLeastLoadAvoidsBusyEngine: two reference engines, one kept busy from
// outside (one running slot, a request waiting). Under least_load every new
// request goes to the idle one, and its record carries that engine's load
// as seen at routing; the engines are scraped from the moment the config is
// in effect, before any request. Reloaded to least_request, the proxy
// ignores the engines' load: of two requests one goes to the busy engine,
// and its record shows the queue it met.
func TestLeastLoadAvoidsBusyEngine(t *testing.T) {
	_, busyURL := startEngine(t, refengine.Config{MaxRunning: 1})
	_, idleURL := startEngine(t, refengine.Config{MaxRunning: 1})
	yaml := strings.ReplaceAll(leastLoadYAML, "POLICY", gateway.PolicyLeastLoad)
	addr, sink, p := startGateway(t, yaml, map[string]string{"UP_A": busyURL, "UP_B": idleURL})
	pool := p.Gateway().Snapshot().Pools()[0]
	busy, idle := pool.Upstreams[0], pool.Upstreams[1]

	load := busyEngine(t, busyURL)
	mustWait(t, "the busy engine scraped with a request waiting", func() bool {
		l, known := busy.EngineLoad()
		return known && l.Waiting >= 1 && l.Running == 1
	})
	for i := range 6 {
		if resp, _, err := post(t, addr, refChat("4")); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		r := sink.next(t)
		if r.Upstream != idle.Name || !r.EngineLoad || r.EngineWaiting != 0 || r.EngineRunning > 1 {
			t.Fatalf("request %d went to %s carrying load known %v, waiting %d, running %d; want %s, idle",
				i, r.Upstream, r.EngineLoad, r.EngineWaiting, r.EngineRunning, idle.Name)
		}
	}

	cfg, err := gateway.Parse([]byte(strings.NewReplacer("UP_A", busyURL, "UP_B", idleURL,
		"POLICY", gateway.PolicyLeastRequest).Replace(leastLoadYAML)), "reload.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Gateway().Reload(cfg); err != nil {
		t.Fatal(err)
	}
	// Two requests at once: least_request puts the second where the first
	// is not, whatever the engines report.
	var ours []net.Conn
	for i := range 2 {
		conn, _ := rawClient(t, addr, refChat("1900"))
		ours = append(ours, conn)
		mustWait(t, "the request routed", func() bool { return busy.Outstanding()+idle.Outstanding() == int64(i+1) })
	}
	if busy.Outstanding() != 1 || idle.Outstanding() != 1 {
		t.Fatalf("least_request: outstanding busy %d, idle %d; want one each", busy.Outstanding(), idle.Outstanding())
	}
	for _, c := range append(load, ours...) {
		c.Close()
	}
	r := waitRecord(t, sink, busy.Name)
	if !r.EngineLoad || r.EngineWaiting < 1 {
		t.Errorf("the request routed to the busy engine: load known %v, waiting %d; want the queue it met", r.EngineLoad, r.EngineWaiting)
	}
}

// waitRecord waits for the record of a request on upstream, skipping
// others, within 10 s.
func waitRecord(t *testing.T, sink *captureSink, upstream string) gotRecord {
	t.Helper()
	for end := time.After(10 * time.Second); ; {
		select {
		case r := <-sink.recs:
			if r.Upstream == upstream {
				return r
			}
		case <-end:
			t.Fatalf("no record on %s within 10s", upstream)
		}
	}
}

// TestLeastLoadBurstSpreads: a burst between two scrapes spreads over the
// engines. The only scrape (the interval is an hour) saw engine B running
// one request and A none; each request this replica sends counts on its
// engine until the next scrape, so six requests in flight at once end
// three on each, where the scrape alone would send all six to A.
func TestLeastLoadBurstSpreads(t *testing.T) {
	_, urlA := startEngine(t, refengine.Config{})
	_, urlB := startEngine(t, refengine.Config{})
	_, br := rawClient(t, strings.TrimPrefix(urlB, "http://"), refChat("1900"))
	readUntil(t, br, `"content"`)

	yaml := strings.ReplaceAll(leastLoadYAML, "POLICY", gateway.PolicyLeastLoad)
	addr, sink, p := startGateway(t, yaml, map[string]string{"UP_A": urlA, "UP_B": urlB},
		func(c *Config) { c.ScrapeEngineMetrics = time.Hour })
	a, b := p.gw.Snapshot().Pools()[0].Upstreams[0], p.gw.Snapshot().Pools()[0].Upstreams[1]
	mustWait(t, "both engines scraped", func() bool {
		_, knownA := a.EngineLoad()
		lb, knownB := b.EngineLoad()
		return knownA && knownB && lb.Running == 1
	})

	var conns []net.Conn
	for i := range 6 {
		conn, br := rawClient(t, addr, refChat("1900"))
		readUntil(t, br, `"content"`)
		conns = append(conns, conn)
		if n := a.Outstanding() + b.Outstanding(); n != int64(i+1) {
			t.Fatalf("%d requests outstanding after %d sent", n, i+1)
		}
	}
	if a.Outstanding() != 3 || b.Outstanding() != 3 {
		t.Errorf("burst of six: %d on A, %d on B; want three each", a.Outstanding(), b.Outstanding())
	}
	for _, c := range conns {
		c.Close()
	}
	for range 6 {
		if r := sink.next(t); !r.EngineLoad || (r.Upstream == b.Name) != (r.EngineRunning == 1) {
			t.Errorf("record on %s carries running %d (known %v): the one scrape's", r.Upstream, r.EngineRunning, r.EngineLoad)
		}
	}
}
