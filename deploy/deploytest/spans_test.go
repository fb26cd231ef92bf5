package deploytest

// The engines' trace spans in a pod (docs/engines.md, "Engines' trace
// spans"): the engine beside ttftlens exports to its receiver, and the
// termination grace lets the last records wait for their spans.

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
)

// engineSpanFlags are the engines' flags naming where their spans go:
// vLLM's and SGLang's (SGLang's older spelling too), TGI's.
var engineSpanFlags = []string{"otlp-traces-endpoint", "oltp-traces-endpoint", "otlp-endpoint"}

// engineSpanEndpoint is where an engine container sends its spans, and
// whether it says so.
func engineSpanEndpoint(c *corev1.Container) (string, bool) {
	for _, f := range engineSpanFlags {
		if v, ok := flagValue(c.Args, f); ok {
			return v, true
		}
	}
	return "", false
}

// envValue is the container's variable name, set as a plain value.
func envValue(c *corev1.Container, name string) string {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return ""
	}
	return c.Env[i].Value
}

// reaches reports whether an exporter calling endpoint (host:port) reaches
// a listener on addr (--receive-otlp-*): the same port, and the same host
// or a listener on every address.
func reaches(endpoint, addr string) bool {
	eh, ep, err1 := net.SplitHostPort(endpoint)
	ah, ap, err2 := net.SplitHostPort(addr)
	return err1 == nil && err2 == nil && ep == ap && (eh == ah || ah == "" || ah == "0.0.0.0")
}

// engineSpanProblems: an engine container beside ttftlens that sends spans
// sends them to its receiver, over the protocol that listener speaks; with
// a receiver on, every engine beside it sends them.
func engineSpanProblems(proxy, engine *corev1.Container) []error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{engine.Name}, a...)...))
	}
	grpcAddr, _ := flagValue(proxy.Args, "receive-otlp-grpc")
	httpAddr, _ := flagValue(proxy.Args, "receive-otlp-http")
	endpoint, sends := engineSpanEndpoint(engine)
	switch {
	case !sends && (grpcAddr != "" || httpAddr != ""):
		add("not pointed at ttftlens' span receiver (--otlp-traces-endpoint=http://%s): its records wait for spans that never come", grpcAddr+httpAddr)
		return errs
	case !sends:
		return nil
	case grpcAddr == "" && httpAddr == "":
		add("sends its spans to %s, but ttftlens receives none (no --receive-otlp-grpc)", endpoint)
		return errs
	}
	hostPort, path := endpoint, ""
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		hostPort, path = u.Host, u.Path
	}
	protocol := envValue(engine, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if strings.HasPrefix(protocol, "http/") {
		if path != "/v1/traces" || !reaches(hostPort, httpAddr) {
			add("sends its spans over OTLP/HTTP to %s, not to ttftlens' --receive-otlp-http=%s at /v1/traces", endpoint, httpAddr)
		}
	} else if !reaches(hostPort, grpcAddr) {
		add("sends its spans over OTLP/gRPC to %s, not to ttftlens' --receive-otlp-grpc=%s", endpoint, grpcAddr)
	}
	if slices.Contains(engine.Args, "--disable-log-stats") {
		add("--disable-log-stats: vLLM then records no request timing and sends no span")
	}
	return errs
}

// spanProblems checks a pod's ttftlens container (proxy) against the
// engines' spans: each engine container in the pod is pointed at the
// receiver, and the shutdown lets the last records wait for their spans.
// An engine drains for its preStop sleep plus --shutdown-timeout (vLLM's)
// and flushes its spans as it exits; the last record then waits up to
// --receive-otlp-wait. A native sidecar gets SIGTERM only after the
// engines have exited, so its wait comes after their drain and must fit
// in the pod's grace; a plain container gets SIGTERM with them, so its own
// preStop and --shutdown-grace must outlast the drain and the wait.
func spanProblems(spec *corev1.PodSpec, proxy *corev1.Container) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, engine := range containers(spec) {
		if engine.Name != proxy.Name {
			errs = append(errs, engineSpanProblems(proxy, engine)...)
		}
	}
	_, grpcOn := flagValue(proxy.Args, "receive-otlp-grpc")
	_, httpOn := flagValue(proxy.Args, "receive-otlp-http")
	if !grpcOn && !httpOn {
		return errs
	}
	waitArg, _ := flagValue(proxy.Args, "receive-otlp-wait")
	wait, err := time.ParseDuration(waitArg)
	graceArg, _ := flagValue(proxy.Args, "shutdown-grace")
	grace, err2 := time.ParseDuration(graceArg)
	if err != nil || err2 != nil || spec.TerminationGracePeriodSeconds == nil {
		add("a receiver without --receive-otlp-wait=%q, --shutdown-grace=%q and terminationGracePeriodSeconds: the shutdown is sized from them", waitArg, graceArg)
		return errs
	}
	podGrace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if grace < wait {
		add("--shutdown-grace %v < --receive-otlp-wait %v: the last records could not wait for their spans", grace, wait)
	}
	for _, engine := range containers(spec) {
		timeout, ok := flagValue(engine.Args, "shutdown-timeout")
		if engine.Name == proxy.Name || !ok {
			continue
		}
		secs, _ := strconv.Atoi(timeout)
		drain := preStopSleep(engine) + time.Duration(secs)*time.Second
		if nativeSidecar(proxy) {
			if need := drain + wait + cutMargin; podGrace < need {
				add("terminationGracePeriodSeconds %v < %s's preStop and drain %v + --receive-otlp-wait %v + %v: the kubelet would kill ttftlens while the last records wait for their spans", podGrace, engine.Name, drain, wait, cutMargin)
			}
		} else if own := preStopSleep(proxy) + grace; own < drain+wait {
			add("ttftlens' preStop and --shutdown-grace %v < %s's preStop and drain %v + --receive-otlp-wait %v: the last stream's record could not wait for its span", own, engine.Name, drain, wait)
		}
	}
	return errs
}

// TestSpanChecksFindBrokenSpans proves spanProblems on the chart's
// sidecar examples, which pass it (TestHelmChart): each break is found.
func TestSpanChecksFindBrokenSpans(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, example string
		mutate        func(spec *corev1.PodSpec, proxy, engine *corev1.Container)
		want          string
	}{
		{"engine on another port", "sidecar-vllm", func(_ *corev1.PodSpec, _, e *corev1.Container) {
			setArg(e, "otlp-traces-endpoint", "http://127.0.0.1:4318")
		}, "not to ttftlens' --receive-otlp-grpc=127.0.0.1:4317"},
		{"engine not pointed at the receiver", "sidecar-vllm", func(_ *corev1.PodSpec, _, e *corev1.Container) {
			e.Args = slices.DeleteFunc(e.Args, func(a string) bool { return strings.HasPrefix(a, "--otlp-traces-endpoint=") })
		}, "not pointed at ttftlens' span receiver"},
		{"engine over HTTP to the gRPC receiver", "sidecar-vllm", func(_ *corev1.PodSpec, _, e *corev1.Container) {
			e.Env = append(e.Env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Value: "http/protobuf"})
		}, "over OTLP/HTTP"},
		{"receiver off, engine exporting", "sidecar-vllm", func(_ *corev1.PodSpec, p, _ *corev1.Container) {
			p.Args = slices.DeleteFunc(p.Args, func(a string) bool { return strings.HasPrefix(a, "--receive-otlp-grpc=") })
		}, "but ttftlens receives none"},
		{"stats logging off", "sidecar-vllm", func(_ *corev1.PodSpec, _, e *corev1.Container) {
			e.Args = append(e.Args, "--disable-log-stats")
		}, "sends no span"},
		{"no wait stated", "sidecar-vllm", func(_ *corev1.PodSpec, p, _ *corev1.Container) {
			p.Args = slices.DeleteFunc(p.Args, func(a string) bool { return strings.HasPrefix(a, "--receive-otlp-wait=") })
		}, "the shutdown is sized from them"},
		{"wait longer than the grace", "sidecar-vllm", func(_ *corev1.PodSpec, p, _ *corev1.Container) {
			setArg(p, "receive-otlp-wait", "90s")
		}, "--shutdown-grace 1m10s < --receive-otlp-wait 1m30s"},
		{"native: pod grace without the wait", "sidecar-vllm", func(spec *corev1.PodSpec, _, _ *corev1.Container) {
			n := int64(70)
			spec.TerminationGracePeriodSeconds = &n
		}, "the kubelet would kill ttftlens while the last records wait"},
		{"plain: proxy grace without the wait", "sidecar-plain", func(_ *corev1.PodSpec, p, _ *corev1.Container) {
			setArg(p, "shutdown-grace", "60s")
		}, "the last stream's record could not wait for its span"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := chartutil.ReadValuesFile(chartDir + "/examples/" + tc.example + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			files, err := renderChart(chrt, vals)
			if err != nil {
				t.Fatal(err)
			}
			spec := &decodeChart(t, files).deployments[0].Spec.Template.Spec
			proxy, engine := sidecarPair(t, spec)
			if errs := spanProblems(spec, proxy); len(errs) > 0 {
				t.Fatalf("the example itself: %v", errs)
			}
			tc.mutate(spec, proxy, engine)
			errs := spanProblems(spec, proxy)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
				t.Errorf("found %v, want %q", errs, tc.want)
			}
		})
	}
}

// sidecarPair is a sidecar pod's ttftlens container and its engine.
func sidecarPair(t *testing.T, spec *corev1.PodSpec) (proxy, engine *corev1.Container) {
	t.Helper()
	for _, c := range containers(spec) {
		if c.Name == "ttftlens" {
			proxy = c
		} else {
			engine = c
		}
	}
	if proxy == nil || engine == nil {
		t.Fatalf("no ttftlens and engine in %+v", spec)
	}
	return proxy, engine
}

// TestChartRefusesSpansAcrossReplicas: a gateway of several replicas
// receiving spans is refused, since an engine's spans all reach one
// replica and join only the records that replica holds.
func TestChartRefusesSpansAcrossReplicas(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]any{"receiveSpans": map[string]any{"enabled": true}}
	for name, gateway := range map[string]map[string]any{
		"autoscaled":   {"autoscaling": map[string]any{"enabled": true}},
		"two replicas": {"replicas": 2, "autoscaling": map[string]any{"enabled": false}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderChart(chrt, map[string]any{"mode": "gateway", "ttftlens": on, "gateway": gateway})
			if err == nil || !strings.Contains(err.Error(), "needs one replica") {
				t.Errorf("rendered: %v, want the chart to refuse it", err)
			}
		})
	}
}
