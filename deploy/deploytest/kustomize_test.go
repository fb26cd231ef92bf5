//go:build integration

package deploytest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ttftlens/ttftlens/internal/testbin"
)

// kustomizations are the directories under deploy/kubernetes that
// `kubectl apply -k` takes, with the kinds each renders and where the
// ttftlens container sits in its pod.
var kustomizations = []struct {
	dir   string
	kinds []string // sorted
	proxy string   // "initContainers" (a native sidecar), "containers", or "" (no pod)
}{
	{"gateway", []string{"ConfigMap", "Deployment", "HorizontalPodAutoscaler", "NetworkPolicy", "PodDisruptionBudget", "Service"}, "containers"},
	{"monitoring", []string{"PodMonitor"}, ""},
	{"sidecar", []string{"Deployment", "NetworkPolicy", "Service"}, "initContainers"},
	{"sidecar-plain", []string{"Deployment", "NetworkPolicy", "Service"}, "containers"},
}

// render runs `kubectl kustomize` on a directory under deploy/kubernetes
// and returns what it prints.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl := testbin.Path(t, "kubectl")
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", filepath.Join(kubernetesDir, dir))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	return out
}

// decodeRendered decodes a kustomization's rendering strictly.
func decodeRendered(t *testing.T, dir string, yamlText []byte) *manifests {
	t.Helper()
	objs, err := decodeAll(yamlText)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return newManifests(objs)
}

// renderAll renders every kustomization.
func renderAll(t *testing.T) map[string][]byte {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(kubernetesDir, "*", "kustomization.yaml"))
	var listed []string
	for _, k := range kustomizations {
		listed = append(listed, filepath.Join(kubernetesDir, k.dir, "kustomization.yaml"))
	}
	if !slices.Equal(dirs, listed) {
		t.Fatalf("kustomizations %v, the table lists %v", dirs, listed)
	}
	out := map[string][]byte{}
	for _, k := range kustomizations {
		out[k.dir] = render(t, k.dir)
	}
	return out
}

func readAlerts(t *testing.T) string {
	t.Helper()
	alerts, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	return string(alerts)
}

// TestKubernetesManifests decodes every kustomization under
// deploy/kubernetes, as `kubectl kustomize` renders it, into the API's own
// Go types, strictly; checks where each variant puts the ttftlens container
// and the references inside and between them (allProblems); and runs the
// real binary's --check-config on every ttftlens container's args: a flag
// serve's flag set does not have, a bad value, or a config file the gateway
// rejects fails here, not in someone's cluster.
func TestKubernetesManifests(t *testing.T) {
	bin := buildTTFTLens(t)
	rendered := map[string]*manifests{}
	for dir, text := range renderAll(t) {
		rendered[dir] = decodeRendered(t, dir, text)
	}
	for _, k := range kustomizations {
		m := rendered[k.dir]
		if !slices.Equal(m.kinds, k.kinds) {
			t.Errorf("%s renders %v, want %v", k.dir, m.kinds, k.kinds)
		}
		var where []string
		for _, d := range m.deployments {
			spec := &d.Spec.Template.Spec
			for _, c := range spec.InitContainers {
				if c.Name == proxyName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
					where = append(where, "initContainers")
				}
			}
			if slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == proxyName }) {
				where = append(where, "containers")
			}
		}
		if want := strings.Fields(k.proxy); !slices.Equal(where, want) {
			t.Errorf("%s: ttftlens runs in %v, want %v", k.dir, where, want)
		}
	}
	for _, err := range allProblems(bin, rendered, readAlerts(t)) {
		t.Error(err)
	}
}

func buildTTFTLens(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ttftlens")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ttftlens").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// container returns the Deployment named deployment and its container
// named container.
func (m *manifests) container(deployment, container string) (*appsv1.Deployment, *corev1.Container) {
	for _, d := range m.deployments {
		if d.Name == deployment {
			return d, findContainer(&d.Spec.Template.Spec, container)
		}
	}
	return nil, nil
}

// brokenReferences are changes to the rendered manifests that decode but
// that a cluster would run otherwise than the manifests say; each must be
// found, with the words in want.
var brokenReferences = []struct {
	name   string
	dir    string
	mutate func(m *manifests)
	want   string
}{
	{"service target port", "gateway", func(m *manifests) { m.services[0].Spec.Ports[0].TargetPort = intstr.FromString("web") }, "port web is on no container"},
	{"probe port", "gateway", func(m *manifests) {
		_, c := m.container("ttftlens", "ttftlens")
		c.ReadinessProbe.HTTPGet.Port = intstr.FromString("healthz")
	}, "readinessProbe calls port healthz"},
	{"pdb selector", "gateway", func(m *manifests) {
		m.pdbs[0].Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "ttftlen"
	}, "PodDisruptionBudget ttftlens: selector app.kubernetes.io/name=ttftlen selects no pod"},
	{"network policy port", "gateway", func(m *manifests) {
		p := intstr.FromString("metrics")
		m.netpols[0].Spec.Ingress[1].Ports[0].Port = &p
	}, "NetworkPolicy ttftlens: port metrics is on no container"},
	{"hpa target", "gateway", func(m *manifests) { m.hpas[0].Spec.ScaleTargetRef.Name = "gateway" }, "is not a Deployment here"},
	{"replicas under an hpa", "gateway", func(m *manifests) {
		n := int32(3)
		m.deployments[0].Spec.Replicas = &n
	}, "states replicas"},
	{"no cpu request under an hpa", "gateway", func(m *manifests) {
		_, c := m.container("ttftlens", "ttftlens")
		delete(c.Resources.Requests, corev1.ResourceCPU)
	}, "requests no CPU"},
	{"topology spread selector", "gateway", func(m *manifests) {
		m.deployments[0].Spec.Template.Spec.TopologySpreadConstraints[1].LabelSelector.MatchLabels = map[string]string{"app": "ttftlens"}
	}, "counts pods other than its own"},
	{"configmap key", "gateway", func(m *manifests) {
		m.configMaps[0].Data = map[string]string{"config.yaml": m.configMaps[0].Data["gateway.yaml"]}
	}, "ConfigMap ttftlens-gateway has no key \"gateway.yaml\""},
	{"config mounted by subPath", "gateway", func(m *manifests) {
		_, c := m.container("ttftlens", "ttftlens")
		c.VolumeMounts[0].SubPath = "gateway.yaml"
	}, "subPath"},
	{"config file the gateway refuses", "gateway", func(m *manifests) {
		m.configMaps[0].Data["gateway.yaml"] = strings.Replace(m.configMaps[0].Data["gateway.yaml"], "pool: small", "pool: medium", 1)
	}, "--check-config: exit status 2"},
	{"a flag serve does not have", "gateway", func(m *manifests) {
		_, c := m.container("ttftlens", "ttftlens")
		c.Args = append(c.Args, "--shutdown-grace-period=60s")
	}, "flag provided but not defined: -shutdown-grace-period"},
	{"admin port", "gateway", func(m *manifests) {
		_, c := m.container("ttftlens", "ttftlens")
		setArg(c, "admin-listen", ":9465")
	}, "--admin-listen=:9465 is not the port named admin"},
	{"termination grace", "gateway", func(m *manifests) {
		n := int64(30)
		m.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds = &n
	}, "terminationGracePeriodSeconds 30s < preStop 5s + --shutdown-grace 1m0s"},
	{"native sidecar's port by name", "sidecar", func(m *manifests) { m.services[0].Spec.Ports[0].TargetPort = intstr.FromString("http") }, "port name http is an init container's"},
	{"engine drains longer than the proxy's grace", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "vllm")
		setArg(c, "shutdown-timeout", "120")
	}, "the proxy would cut streams it finishes"},
	{"engine not pointed at the span receiver", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "vllm")
		setArg(c, "otlp-traces-endpoint", "http://127.0.0.1:4318")
	}, "not to ttftlens' --receive-otlp-grpc=127.0.0.1:4317"},
	{"pod grace without the span wait", "sidecar", func(m *manifests) {
		n := int64(84)
		m.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds = &n
	}, "the kubelet would kill ttftlens while the last records wait"},
	{"proxy grace without the span wait", "sidecar-plain", func(m *manifests) {
		_, c := m.container("llama-8b", "ttftlens")
		setArg(c, "shutdown-grace", "75s")
	}, "the last stream's record could not wait for its span"},
	{"upstream port", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "ttftlens")
		setArg(c, "upstream", "http://127.0.0.1:8001")
	}, "no other container of the pod declares port 8001"},
	{"engine without readiness", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "vllm")
		c.ReadinessProbe = nil
	}, "a pod whose engine is loading would get clients"},
	{"engine with liveness", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "vllm")
		c.LivenessProbe = c.ReadinessProbe
	}, "container vllm has a liveness probe"},
	{"proxy liveness on the client port", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "ttftlens")
		c.LivenessProbe.HTTPGet.Port = intstr.FromString("http")
	}, "liveness is not probed on the admin port"},
	{"port name too long", "sidecar", func(m *manifests) {
		_, c := m.container("llama-8b", "vllm")
		c.Ports[0].Name = "engine-metrics-port"
		c.ReadinessProbe.HTTPGet.Port = intstr.FromString("engine-metrics-port")
	}, "must be no more than 15 characters"},
	{"pod monitor port", "monitoring", func(m *manifests) { m.monitors[0].Spec.PodMetricsEndpoints[0].Port = "metrics" }, "port \"metrics\" is on none of the pods"},
	{"pod monitor job", "monitoring", func(m *manifests) {
		job := "ttftlens-admin"
		m.monitors[0].Spec.PodMetricsEndpoints[0].RelabelConfigs[0].Replacement = &job
	}, "scraped as job \"ttftlens-admin\", which the alerts never name"},
	{"pod monitor interval", "monitoring", func(m *manifests) { m.monitors[0].Spec.PodMetricsEndpoints[0].Interval = "15 seconds" }, `port admin: unknown unit " seconds"`},
}

// TestKubernetesReferenceChecksFindBrokenReferences proves the checks of
// TestKubernetesManifests, which find nothing in the manifests as they are:
// each broken reference is found.
func TestKubernetesReferenceChecksFindBrokenReferences(t *testing.T) {
	bin := buildTTFTLens(t)
	texts := renderAll(t)
	alerts := readAlerts(t)
	for _, tt := range brokenReferences {
		t.Run(tt.name, func(t *testing.T) {
			rendered := map[string]*manifests{}
			for dir, text := range texts {
				rendered[dir] = decodeRendered(t, dir, text)
			}
			tt.mutate(rendered[tt.dir])
			errs := allProblems(bin, rendered, alerts)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }) {
				t.Errorf("found %v, want %q", errs, tt.want)
			}
		})
	}
}
