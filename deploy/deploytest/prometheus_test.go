//go:build integration

package deploytest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttftlens/ttftlens/bench/lab"
	"github.com/ttftlens/ttftlens/exporters"
	"github.com/ttftlens/ttftlens/internal/testbin"
	"github.com/ttftlens/ttftlens/proxy"
	"github.com/ttftlens/ttftlens/refengine"
)

const (
	upstreamName = "engine-a"
	modelName    = "ttftlens-ref"
	// rateInterval stands in for Grafana's $__rate_interval: at least four
	// scrapes (1 s here) and short enough that the load fills it.
	rateInterval = "15s"
)

// zeroUnderLoad are series that stay at zero under this load, so a query on
// them must parse and return series but need not return a non-zero value.
var zeroUnderLoad = map[string]string{
	"ttftlens_records_dropped_total":              "no sink drops a record under this load",
	"ttftlens_upstream_unsplit_total":             "the reference engine reports its timings on every request",
	"ttftlens_engine_report_inconsistent_total":   "the reference engine's timings always fit the proxy's window",
	"ttftlens_tokens_after_cancel_total":          "it counts content the proxy held for a client that left, and this load's clients read what they get until they leave",
	"ttftlens_queue_depth":                        "this stack's pass-through gateway has no admission queue (max_in_flight unset)",
	"ttftlens_ttft_prediction_ratio":              "this stack's pass-through gateway routes by least_request, which predicts nothing (proxy/leastttft_test.go routes by least_ttft)",
	"ttftlens_cached_prompt_tokens_total":         "this load need not repeat a prompt prefix the engine could cache",
	"ttftlens_cache_reported_prompt_tokens_total": "its share panel divides by it; counted only beside ttftlens_cached_prompt_tokens_total",
}

// TestDashboardAndRulesOnPrometheus runs the reference engine and two
// replicas of ttftlens in front of it in-process, lets a real Prometheus
// scrape all three every second while a load with several end reasons runs
// through both replicas, then evaluates every query of
// deploy/grafana/ttftlens.json (each must parse and return data, and
// aggregate across the replicas) and checks that every rule of
// deploy/prometheus evaluates without error and aggregates across them too.
func TestDashboardAndRulesOnPrometheus(t *testing.T) {
	promBin := testbin.Path(t, "prometheus")
	start := time.Now()

	engineAddr, proxyAddrs, adminAddrs := startReplicas(t)
	prom := startPrometheus(t, promBin, adminAddrs, engineAddr, nil)
	t.Logf("engine %s, proxies %v, admins %v, prometheus %s (up after %v)", engineAddr, proxyAddrs, adminAddrs, prom.base, time.Since(start).Round(time.Millisecond))

	// Prometheus hands new targets to its scrapers about 5 s after it
	// starts: wait for the first scrape of all, so the load is seen whole.
	prom.waitFor(t, `count(up == 1)`, float64(1+len(adminAddrs)), 20*time.Second)
	loadStart := time.Now()
	sent := driveLoad(t, proxyAddrs)
	loadEnd := time.Now()
	t.Logf("load: %d requests in %v", sent, loadEnd.Sub(loadStart).Round(time.Millisecond))

	// Wait until Prometheus has scraped every record the proxies emitted.
	prom.waitFor(t, `sum(ttftlens_requests_total{job="ttftlens"})`, float64(sent), 15*time.Second)
	evalAt := time.Now()
	perReplica := `count(sum by (instance) (ttftlens_requests_total{job="ttftlens"}) > 0)`
	if s, err := prom.query(perReplica, evalAt); err != nil || len(s) != 1 || len(s[0].values()) != 1 || s[0].values()[0] != float64(len(adminAddrs)) {
		t.Fatalf("%s = %v (%v), want %d: every replica must have served part of the load", perReplica, s, err, len(adminAddrs))
	}
	// Every request of the load named the configured model and reached the
	// one upstream, so requests_total counts them all on that pair.
	pair := fmt.Sprintf(`sum(ttftlens_requests_total{job="ttftlens", model=%q, upstream=%q})`, modelName, upstreamName)
	if s, err := prom.query(pair, evalAt); err != nil || len(s) != 1 || len(s[0].values()) != 1 || s[0].values()[0] != float64(sent) {
		t.Errorf("%s = %v (%v), want %d", pair, s, err, sent)
	}

	dash := loadDashboard(t, filepath.Join("..", "grafana", "ttftlens.json"))
	vars := checkVariables(t, prom, dash, loadStart, evalAt)

	// Every target twice: with every variable at All (.*), as the dashboard
	// opens, and with one concrete value each, as in a repeated panel.
	all := map[string]string{}
	for name := range vars {
		all[name] = ".*"
	}
	// The concrete values are the ones the load used; the variables must
	// offer them.
	one := map[string]string{"upstream": upstreamName, "model": modelName, "engine_model": modelName}
	for name := range vars {
		v, ok := one[name]
		if !ok || !slices.Contains(vars[name], v) {
			t.Fatalf("variable %s: values %v, want %q among them", name, vars[name], v)
		}
		one[name] = regexp.QuoteMeta(v)
	}
	checked := 0
	for _, tg := range dash.targets() {
		for _, subst := range []map[string]string{all, one} {
			expr, err := substitute(tg.Expr, subst)
			if err != nil {
				t.Errorf("%s: %v", tg, err)
				continue
			}
			checkTarget(t, prom, tg, expr, loadStart, evalAt)
			checkAcrossReplicas(t, prom, tg.String(), expr, adminAddrs, evalAt)
			checked++
		}
	}
	t.Logf("%d panel queries evaluated", checked)

	groups := checkRules(t, prom)
	checkRulesAcrossReplicas(t, prom, groups, adminAddrs, evalAt)
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// ---- the system under test

// replicas is how many proxies the dashboard's test runs in front of one
// engine.
const replicas = 2

// startReplicas runs bench/lab's stack (the reference engine and a proxy)
// and more proxies in front of the same engine, as replicas of a gateway
// behind one Service: each with its metrics wired as cmd/ttftlens/serve.go
// wires them, served by its own admin listener, and each scraping the
// engine's metrics. It returns the engine's host:port and the proxies' and
// admin listeners'. (A later stack's own engine is idle: nothing sends to it
// and Prometheus does not scrape it.)
func startReplicas(t *testing.T) (engineAddr string, proxyAddrs, adminAddrs []string) {
	t.Helper()
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	var engineURL string
	for range replicas {
		reg := exporters.NewRegistry()
		metrics := exporters.NewMetrics(reg, exporters.MetricOptions{
			Models: []string{modelName}, Upstreams: []string{upstreamName}, Version: "deploytest"})
		sinks := exporters.NewFanout(exporters.Named{Name: "metrics", Sink: metrics})
		sinks.Track(metrics)
		s, err := lab.Start(lab.StackConfig{
			Engine: refengine.Config{ModelName: modelName},
			Proxy: func(c *proxy.Config) {
				if engineURL != "" {
					c.Upstream = engineURL
				}
				c.UpstreamName = upstreamName
				c.Tracker = metrics
				c.ScrapeEngineMetrics, c.EngineWaste = time.Second, metrics
			},
			Sink:     sinks,
			Registry: reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if engineURL == "" {
			engineURL = s.EngineURL
		}
		proxyAddrs = append(proxyAddrs, host(s.URL))
		adminAddrs = append(adminAddrs, host(s.Admin))
	}
	return host(engineURL), proxyAddrs, adminAddrs
}

// ---- Prometheus

type prometheus struct {
	base   string
	client *http.Client
}

// startPrometheus runs the prometheus binary with its own config, data
// directory and loopback port (never the Debian service's), scraping the
// admin listeners (job ttftlens) and the engine every second, with deploy/prometheus's rule
// files evaluated every second; rewrite, when set, edits the test's copy
// of the rule files further.
func startPrometheus(t *testing.T, bin string, adminAddrs []string, engineAddr string, rewrite func([]byte) []byte) *prometheus {
	t.Helper()
	dir := t.TempDir()
	var ruleFiles []string
	for _, name := range []string{"recording.yml", "alerts.yml"} {
		b, err := os.ReadFile(filepath.Join("..", "prometheus", name))
		if err != nil {
			t.Fatal(err)
		}
		// The groups' production intervals (30 s) would not evaluate
		// within the test.
		b = regexp.MustCompile(`(?m)^(\s+interval:)\s*\S+$`).ReplaceAll(b, []byte("$1 1s"))
		if rewrite != nil {
			b = rewrite(b)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		ruleFiles = append(ruleFiles, path)
	}
	admins, err := json.Marshal(adminAddrs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q, %q]
scrape_configs:
  - job_name: ttftlens
    static_configs: [{targets: %s}]
  - job_name: engine
    static_configs: [{targets: [%q]}]
`, ruleFiles[0], ruleFiles[1], admins, engineAddr)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil && len(b) > 0 {
				t.Logf("prometheus log:\n%s", tail(b, 4000))
			}
		}
	})
	p := &prometheus{base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus exited (%v):\n%s", err, tail(b, 4000))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus not ready at %s after 30s:\n%s", addr, tail(b, 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// apiResponse is the envelope of Prometheus' HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`  // vector
	Values [][2]any          `json:"values"` // matrix
}

func (p *prometheus) get(path string, params url.Values) (json.RawMessage, error) {
	resp, err := p.client.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// query evaluates expr at one instant and returns its samples (a scalar
// result counts as one sample).
func (p *prometheus) query(expr string, at time.Time) ([]sample, error) {
	data, err := p.get("/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

// queryRange evaluates expr every second over [from, to].
func (p *prometheus) queryRange(expr string, from, to time.Time) ([]sample, error) {
	data, err := p.get("/api/v1/query_range", url.Values{"query": {expr},
		"start": {unix(from)}, "end": {unix(to)}, "step": {"1"}})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

func decodeResult(data json.RawMessage) ([]sample, error) {
	var d queryData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "vector", "matrix":
		var s []sample
		err := json.Unmarshal(d.Result, &s)
		return s, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(d.Result, &v)
		return []sample{{Value: v}}, err
	}
	return nil, fmt.Errorf("result type %q", d.ResultType)
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// values returns a sample's values, instant or range.
func (s sample) values() []float64 {
	var out []float64
	add := func(p [2]any) {
		if str, ok := p[1].(string); ok {
			if v, err := strconv.ParseFloat(str, 64); err == nil {
				out = append(out, v)
			}
		}
	}
	if s.Value[1] != nil {
		add(s.Value)
	}
	for _, p := range s.Values {
		add(p)
	}
	return out
}

// waitFor polls expr until its single value reaches want.
func (p *prometheus) waitFor(t *testing.T, expr string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []float64
	for time.Now().Before(deadline) {
		s, err := p.query(expr, time.Now())
		if err == nil && len(s) == 1 {
			last = s[0].values()
			if len(last) == 1 && last[0] >= want {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: still %v after %v, want %v", expr, last, timeout, want)
}

// ---- load

// request is one client request of the load.
type request struct {
	name  string
	fault string
	body  string
	// The client leaves after leaveAfter (also with no byte received yet),
	// or after leaveChunks content chunks; zero: it reads to the end.
	leaveAfter  time.Duration
	leaveChunks int
}

func (r request) leaves() bool { return r.leaveAfter > 0 || r.leaveChunks > 0 }

func chat(maxTokens int, extra string) string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,%s"messages":[{"role":"user","content":"Tell me a story about a lighthouse"}]}`,
		modelName, maxTokens, extra)
}

// loadPlan is the load: mostly plain streams, plus every case a panel
// needs to have data (queueing, slow preparation, failures, disconnects,
// client cancels in prefill and in decode, buffering).
func loadPlan() []request {
	var plan []request
	add := func(n int, r request) {
		for range n {
			plan = append(plan, r)
		}
	}
	add(20, request{name: "plain", body: chat(12, "")})
	// Long generations keep the engine's running batch non-empty across
	// scrapes: each step holding one sleeps 1 ms per layer, so 200 tokens
	// take over a second, whatever the machine's speed.
	add(3, request{name: "long", fault: "straggler=0:1ms", body: chat(200, `"ignore_eos":true,`)})
	add(3, request{name: "queue", fault: "queue_delay=1200ms", body: chat(6, "")})
	add(2, request{name: "slow tokenizer", fault: "slow_tokenizer=150ms", body: chat(6, "")})
	add(3, request{name: "503", fault: "http_error=503", body: chat(6, "")})
	add(3, request{name: "error event", fault: "error_after=2", body: chat(8, "")})
	add(2, request{name: "truncated", fault: "close_after=3", body: chat(8, "")})
	add(1, request{name: "content filter", fault: "content_filter=2", body: chat(8, "")})
	add(2, request{name: "buffered", fault: "buffered", body: chat(16, "")})
	// Cancels: during prefill (held in the engine's queue), and in decode,
	// once with the engine aborting and once with it decoding on.
	add(2, request{name: "cancel in prefill", fault: "queue_delay=2s", body: chat(6, ""), leaveAfter: 300 * time.Millisecond})
	add(2, request{name: "cancel in decode", body: chat(200, `"ignore_eos":true,`), leaveChunks: 3})
	add(2, request{name: "cancel, engine decodes on", fault: "keep_decoding", body: chat(200, `"ignore_eos":true,`), leaveChunks: 3})
	return plan
}

// driveLoad sends the plan, interleaved, spread over about ten seconds, in
// turn to each of addrs, and returns how many requests it sent.
func driveLoad(t *testing.T, addrs []string) int {
	t.Helper()
	plan := loadPlan()
	// Interleave deterministically so every kind runs across the window.
	order := make([]request, 0, len(plan))
	for i := 0; i < 7; i++ {
		for j := i; j < len(plan); j += 7 {
			order = append(order, plan[j])
		}
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	gap := 10 * time.Second / time.Duration(len(order))
	for i, r := range order {
		time.Sleep(gap)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := send(t.Context(), client, addrs[i%len(addrs)], r); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("#%d %s: %v", i, r.name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	return len(order)
}

// send runs one request and reads its stream (or leaves early).
func send(ctx context.Context, client *http.Client, addr string, r request) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(r.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.fault != "" {
		req.Header.Set("X-Ttftlens-Fault", r.fault)
	}
	if r.leaveAfter > 0 {
		timer := time.AfterFunc(r.leaveAfter, cancel)
		defer timer.Stop()
	}
	resp, err := client.Do(req)
	if err != nil {
		if r.leaves() && ctx.Err() != nil {
			return nil // left before the response, as planned
		}
		return err
	}
	defer resp.Body.Close()
	if !r.leaves() && resp.StatusCode != http.StatusOK && !strings.Contains(r.fault, "http_error") {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			chunks++
		}
		if r.leaveChunks > 0 && chunks >= r.leaveChunks {
			cancel()
			return nil
		}
	}
	// Read errors are expected for the faults that cut the stream.
	return nil
}

// ---- the dashboard

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Panels      []panel  `json:"panels"` // a collapsed row's panels
	Targets     []target `json:"targets"`
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
	panel *panel
}

func (t target) String() string {
	return fmt.Sprintf("panel %d %q target %s", t.panel.ID, t.panel.Title, t.RefID)
}

func loadDashboard(t *testing.T, path string) *dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var raw struct {
		SchemaVersion int `json:"schemaVersion"`
	}
	_ = json.Unmarshal(b, &raw)
	if raw.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want >= 39", raw.SchemaVersion)
	}
	for _, p := range d.allPanels() {
		if p.Type != "row" && strings.TrimSpace(p.Description) == "" {
			t.Errorf("panel %d %q has no description", p.ID, p.Title)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %d %q has no query", p.ID, p.Title)
		}
	}
	return &d
}

func (d *dashboard) allPanels() []*panel {
	var out []*panel
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for i := range ps {
			out = append(out, &ps[i])
			walk(ps[i].Panels)
		}
	}
	walk(d.Panels)
	return out
}

func (d *dashboard) targets() []target {
	var out []target
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			tg.panel = p
			out = append(out, tg)
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces Grafana's variables in expr.
func substitute(expr string, vars map[string]string) (string, error) {
	var bad []string
	out := varRef.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRef.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return rateInterval
		}
		if v, ok := vars[name]; ok {
			return v
		}
		bad = append(bad, m)
		return m
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("unknown variables %v in %s", bad, expr)
	}
	return out, nil
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*(\w+)\s*\)\s*$`)

// checkVariables evaluates every query variable (label_values(series,
// label)) through /api/v1/label/<label>/values and returns their values.
func checkVariables(t *testing.T, p *prometheus, d *dashboard, from, to time.Time) map[string][]string {
	t.Helper()
	vars := map[string][]string{}
	all := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		all[v.Name] = ".*"
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(series, label)", v.Name, q)
			continue
		}
		sel, err := substitute(m[1], all)
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		data, err := p.get("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {sel}, "start": {unix(from)}, "end": {unix(to)}})
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		var vals []string
		if err := json.Unmarshal(data, &vals); err != nil || len(vals) == 0 {
			t.Errorf("variable %s (%s): no values (%v)", v.Name, q, err)
			continue
		}
		vars[v.Name] = vals
		t.Logf("variable %s = %v", v.Name, vals)
	}
	if t.Failed() {
		t.FailNow()
	}
	return vars
}

var metricName = regexp.MustCompile(`\b(?:ttftlens|vllm)[a-z_:]*\b`)

// checkTarget evaluates one query: it must parse and return series at the
// end of the load, and (unless all its series are known to stay at zero) a
// finite non-zero value somewhere in the load window.
func checkTarget(t *testing.T, p *prometheus, tg target, expr string, from, at time.Time) {
	t.Helper()
	s, err := p.query(expr, at)
	if err != nil {
		t.Errorf("%s: %v\n  query: %s", tg, err, expr)
		return
	}
	if len(s) == 0 {
		t.Errorf("%s: no data\n  query: %s", tg, expr)
		return
	}
	names := metricName.FindAllString(expr, -1)
	exempt := len(names) > 0
	for _, n := range names {
		if _, ok := zeroUnderLoad[strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count")]; !ok {
			exempt = false
		}
	}
	if exempt {
		return
	}
	r, err := p.queryRange(expr, from, at)
	if err != nil {
		t.Errorf("%s: range: %v", tg, err)
		return
	}
	for _, smp := range r {
		for _, v := range smp.values() {
			if v != 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
				return
			}
		}
	}
	t.Errorf("%s: only zero or NaN values over the load: the load does not exercise it\n  query: %s", tg, expr)
}

// ---- the rules

// rule and ruleGroup are what /api/v1/rules says of the rules loaded.
type rule struct {
	Name       string `json:"name"`
	Query      string `json:"query"`
	Health     string `json:"health"`
	LastError  string `json:"lastError"`
	Type       string `json:"type"`
	Evaluation string `json:"lastEvaluation"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Rules []rule `json:"rules"`
}

// checkRules waits until every rule group has been evaluated, then checks
// that no rule failed and that every recording rule produced series. It
// returns the groups.
func checkRules(t *testing.T, p *prometheus) []ruleGroup {
	t.Helper()
	var groups []ruleGroup
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := p.get("/api/v1/rules", url.Values{})
		if err != nil {
			t.Fatalf("rules: %v", err)
		}
		var d struct {
			Groups json.RawMessage `json:"groups"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(d.Groups, &groups); err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, g := range groups {
			for _, r := range g.Rules {
				if r.Health == "unknown" || r.Health == "" {
					pending++
				}
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rules not evaluated after 10s", pending)
		}
		time.Sleep(250 * time.Millisecond)
	}
	n := 0
	for _, g := range groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s (group %s): health %s: %s", r.Name, g.Name, r.Health, r.LastError)
			}
			if r.Type != "recording" {
				continue
			}
			s, err := p.query(r.Name, time.Now())
			if err != nil || len(s) == 0 {
				t.Errorf("recording rule %s: no series (%v)", r.Name, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("prometheus loaded no rules")
	}

	// The stacked means of the first panel add up to the mean TTFT: per
	// request the stages add up to its TTFT, so the shares sum to 1.
	shares := fmt.Sprintf(`sum by (model, upstream) (model_upstream_stage:ttftlens_stage_duration_seconds:share_of_ttft_rate5m{model=%q, upstream=%q})`, modelName, upstreamName)
	s, err := p.query(shares, time.Now())
	if err != nil || len(s) != 1 || len(s[0].values()) != 1 {
		t.Errorf("%s: %v %v", shares, s, err)
	} else if v := s[0].values()[0]; math.Abs(v-1) > 1e-6 {
		t.Errorf("stage shares of the mean TTFT add up to %v, want 1", v)
	}
	t.Logf("%d rules in %d groups evaluated", n, len(groups))
	return groups
}
