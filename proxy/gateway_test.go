package proxy

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/endreason"
	"github.com/ttftlens/ttftlens/gateway"
	"github.com/ttftlens/ttftlens/internal/clock"
	"github.com/ttftlens/ttftlens/stages"
)

// startGateway runs a proxy with a gateway built from a YAML config, in
// which UP_A, UP_B and DEAD are replaced by upstream URLs; mod, when set,
// changes the proxy's configuration. The gateway shares the proxy's Clock.
func startGateway(t *testing.T, yaml string, urls map[string]string, mod ...func(*Config)) (string, *captureSink, *Proxy) {
	t.Helper()
	for k, v := range urls {
		yaml = strings.ReplaceAll(yaml, k, v)
	}
	cfg, err := gateway.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var modded Config
	for _, m := range mod {
		m(&modded)
	}
	gw, err := gateway.New(cfg, gateway.Options{Clock: modded.Clock})
	if err != nil {
		t.Fatal(err)
	}
	gw.Start()
	t.Cleanup(gw.Stop)
	return startProxy(t, "", func(c *Config) {
		c.Gateway = gw
		for _, m := range mod {
			m(c)
		}
	})
}

// deadURL is an address nothing listens on, for the test's whole run: its
// port is held by a socket bound to it that does not listen, so a connect
// is refused. (A port taken and let go at once could be another test's
// listener by the time the proxy dials it.)
func deadURL(t *testing.T) string {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

const gatewayYAML = `
auth: keys
keys:
  - name: alice
    key: sha256:` + "ALICE_HASH" + `
    allow_breakdown: true
  - name: bob
    key: sha256:` + "BOB_HASH" + `
    quota: {interval: 1h, requests: 2}
routes:
  - model: m
    pool: a
    max_tokens: 16
  - model: slow
    pool: b
pools:
  - name: a
    upstreams: [UP_A]
  - name: b
    upstreams: [UP_B]
    max_in_flight: 1
    queue_size: 1
    queue_max_wait: 2s
`

func chat(model, extra string) string {
	return `{"model":"` + model + `","stream":true` + extra + `,"messages":[{"role":"user","content":"hi"}]}`
}

// TestGatewayRejections checks each refusal through real sockets: status,
// the OpenAI error body, Retry-After, and the record's reason and detail.
func TestGatewayRejections(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.stream(2, 0) })
	other := startUpstream(t, func(c *upConn) { c.stream(2, 0) })
	yaml := strings.NewReplacer("ALICE_HASH", strings.TrimPrefix(gateway.HashKey("alice-key"), "sha256:"),
		"BOB_HASH", strings.TrimPrefix(gateway.HashKey("bob-key"), "sha256:")).Replace(gatewayYAML)
	addr, sink, _ := startGateway(t, yaml, map[string]string{"UP_A": up.url, "UP_B": other.url})
	tests := []struct {
		name       string
		key, body  string
		status     int
		detail     endreason.Detail
		retryAfter bool
	}{
		{"no key", "", chat("m", ""), 401, endreason.DetailMissingKey, false},
		{"wrong key", "nope", chat("m", ""), 401, endreason.DetailInvalidKey, false},
		{"ok", "alice-key", chat("m", ""), 200, endreason.DetailStop, false},
		{"unknown model", "alice-key", chat("gpt-9", ""), 400, endreason.DetailUnknownModel, false},
		{"max_tokens over the route's cap", "alice-key", chat("m", `,"max_tokens":17`), 400, endreason.DetailInvalidParam, false},
		{"temperature out of range", "alice-key", chat("m", `,"temperature":3`), 400, endreason.DetailInvalidParam, false},
		{"malformed JSON", "alice-key", `{"model":`, 400, endreason.DetailMalformedRequest, false},
		{"quota: first", "bob-key", chat("m", ""), 200, endreason.DetailStop, false},
		{"quota: second", "bob-key", chat("m", ""), 200, endreason.DetailStop, false},
		{"quota: third is over", "bob-key", chat("m", ""), 429, endreason.DetailQuotaExceeded, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.key != "" {
				hdr = []string{"Authorization", "Bearer " + tt.key}
			}
			resp, body, err := post(t, addr, tt.body, hdr...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.status >= 400 && !isErrorObject(body) {
				t.Errorf("body %q is not an OpenAI error", body)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("Retry-After %q, want present=%v", resp.Header.Get("Retry-After"), tt.retryAfter)
			}
			r := sink.next(t)
			if r.Detail != tt.detail {
				t.Errorf("record %s/%s, want detail %s", r.Reason, r.Detail, tt.detail)
			}
			if tt.status == 200 {
				if got := up.request(t).req.Header.Get("Authorization"); got != "" {
					t.Errorf("the client's key reached the upstream: %q", got)
				}
				if want := strings.TrimSuffix(tt.key, "-key"); r.Key != want {
					t.Errorf("record key %q, want %q", r.Key, want)
				}
				if !r.Timeline.Has(stages.Admitted) {
					t.Error("no admitted mark")
				}
			}
		})
	}
}

// TestAdmissionQueue fills an upstream's single slot and its one-place
// queue: the queued request's wait is its queue stage, the next is refused,
// and a client that leaves the queue frees its place. The proxy and the
// gateway share a fake clock: the timers armed on it say who waits where
// (each request in the proxy has its deadline timer, each queued one its
// queue timer too), and the time a request waits is the time the test
// moves the clock.
func TestAdmissionQueue(t *testing.T) {
	hold := make(chan struct{})
	up := startUpstream(t, func(c *upConn) {
		if strings.Contains(c.body, "hold") {
			<-hold
		}
		c.stream(1, 0)
	})
	other := startUpstream(t, func(c *upConn) { c.stream(1, 0) })
	yaml := strings.ReplaceAll(gatewayYAML, "auth: keys", "auth: none")
	yaml = yaml[:strings.Index(yaml, "keys:")] + yaml[strings.Index(yaml, "routes:"):]
	clk := &clock.Fake{}
	addr, sink, _ := startGateway(t, yaml, map[string]string{"UP_A": other.url, "UP_B": up.url},
		func(c *Config) { c.Clock = clk })

	results := make(chan int, 2)
	go func() { resp, _, _ := post(t, addr, chat("slow", `,"user":"hold"`)); results <- resp.StatusCode }()
	up.request(t) // it holds the slot
	conn, _ := rawClient(t, addr, chat("slow", ""))
	clk.WaitArmed(3) // it waits in the queue: two deadline timers and its queue timer

	// The queue is full.
	resp, body, err := post(t, addr, chat("slow", ""))
	if err != nil || resp.StatusCode != 503 || !strings.Contains(body, "queue") {
		t.Fatalf("third request: %d %q %v, want 503 queue_full", resp.StatusCode, body, err)
	}
	if r := sink.next(t); r.Detail != endreason.DetailQueueFull || r.Reason != endreason.WorkerFailure {
		t.Errorf("third record %s/%s", r.Reason, r.Detail)
	}
	// The queued client leaves: recorded as cancelled while queued, and its
	// place is free for the next request.
	conn.Close()
	if r := sink.next(t); r.Reason != endreason.ClientCancel || r.Phase != endreason.PhaseQueued {
		t.Errorf("left-the-queue record %s/%s phase %s", r.Reason, r.Detail, r.Phase)
	}
	go func() { resp, _, _ := post(t, addr, chat("slow", "")); results <- resp.StatusCode }()
	clk.WaitArmed(3) // queued, as above
	const waited = 300 * time.Millisecond
	clk.Advance(waited)
	close(hold)
	for range 2 {
		if s := <-results; s != 200 {
			t.Errorf("held or queued request: status %d", s)
		}
	}
	var queued gotRecord
	for range 2 {
		if r := sink.next(t); queued.RequestID == "" || r.bd.Stages[stages.Queue] > queued.bd.Stages[stages.Queue] {
			queued = r
		}
	}
	if q := queued.bd.Stages[stages.Queue]; q != waited {
		t.Errorf("queued request's queue stage %v, want %v", q, waited)
	}
}

// TestRoutingAndRetry checks least-outstanding routing over two upstreams,
// and the one retry on another upstream after a connect failure.
func TestRoutingAndRetry(t *testing.T) {
	const concurrent = 4
	var mu sync.Mutex
	seen := map[string]int{}
	all := make(chan struct{}) // closed when the concurrent requests have all arrived: each holds its upstream until then
	script := func(name string) func(c *upConn) {
		return func(c *upConn) {
			mu.Lock()
			seen[name]++
			held := name != "c"
			if held && seen["a"]+seen["b"] == concurrent {
				close(all)
			}
			mu.Unlock()
			if held {
				<-all
			}
			c.stream(1, 0)
		}
	}
	a, b, c := startUpstream(t, script("a")), startUpstream(t, script("b")), startUpstream(t, script("c"))
	yaml := `
routes:
  - {model: m, pool: two}
  - {model: flaky, pool: withdead}
pools:
  - {name: two, upstreams: [UP_A, UP_B]}
  - {name: withdead, upstreams: [DEAD, UP_C], ejection: {consecutive_failures: -1}}
`
	addr, sink, _ := startGateway(t, yaml, map[string]string{"UP_A": a.url, "UP_B": b.url, "UP_C": c.url, "DEAD": deadURL(t)})
	var wg sync.WaitGroup
	for range concurrent {
		wg.Go(func() {
			if resp, _, err := post(t, addr, chat("m", "")); err != nil || resp.StatusCode != 200 {
				t.Errorf("routed request: %v %d", err, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	for range concurrent {
		sink.next(t)
	}
	mu.Lock()
	if seen["a"] != concurrent/2 || seen["b"] != concurrent/2 {
		t.Errorf("%d concurrent requests went %v, want half each (least outstanding)", concurrent, seen)
	}
	mu.Unlock()

	// The dead upstream is tried (round robin) and the request moves on.
	for i := range 4 {
		resp, body, err := post(t, addr, chat("flaky", ""))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d on a pool with a dead upstream: %v %d %s", i, err, resp.StatusCode, body)
		}
		if r := sink.next(t); r.Reason != endreason.Stop || r.Upstream != strings.TrimPrefix(c.url, "http://") {
			t.Errorf("record %s/%s upstream %q", r.Reason, r.Detail, r.Upstream)
		}
	}
}

// TestModelsAndDeadlineHeader checks /v1/models is answered from the routes
// and that a request can shorten its first-token deadline.
func TestModelsAndDeadlineHeader(t *testing.T) {
	up := startUpstream(t, func(c *upConn) { c.waitGone(5 * time.Second) })
	clk := &clock.Fake{}
	addr, sink, _ := startGateway(t, `
routes: [{model: m, pool: p}, {model: other, pool: p}]
pools: [{name: p, upstreams: [UP_A]}]
`, map[string]string{"UP_A": up.url}, func(c *Config) { c.Clock = clk })
	resp, err := testClient().Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprint(&b, resp.Header.Get("Content-Type"))
	resp.Body.Close()
	if r := sink.next(t); r.Reason != endreason.Stop || r.Status != 200 {
		t.Errorf("models record %s/%s %d", r.Reason, r.Detail, r.Status)
	}
	status := make(chan int)
	go func() {
		resp, _, _ := post(t, addr, chat("m", ""), gateway.HeaderTTFTDeadline, "150")
		status <- resp.StatusCode
	}()
	up.request(t)
	if d := clk.WaitArmed(1); d != 150*time.Millisecond {
		t.Fatalf("deadline timer armed %v ahead, want the header's 150ms", d)
	}
	clk.Advance(150*time.Millisecond - 1)
	select {
	case s := <-status:
		t.Fatalf("status %d before the deadline", s)
	default:
	}
	clk.Advance(1)
	if s := <-status; s != 504 {
		t.Errorf("status %d at the deadline, want 504", s)
	}
	if r := sink.next(t); r.Detail != endreason.DetailTTFTDeadline {
		t.Errorf("record %s/%s", r.Reason, r.Detail)
	}
}
