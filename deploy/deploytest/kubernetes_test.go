package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
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

const (
	kubernetesDir = "../kubernetes"
	proxyName     = "ttftlens" // the ttftlens container's name in every pod
	// cutMargin is how long ttftlens may take after --shutdown-grace to cut
	// what is still running (proxy.cutWait, twice) and exit.
	cutMargin = 5 * time.Second
)

// apiTypes are the kinds the manifests may hold, each with the Go type the
// API server decodes it into (for the PodMonitor, podMonitor below).
var apiTypes = map[metav1.TypeMeta]func() any{
	{APIVersion: "v1", Kind: "ConfigMap"}:                           func() any { return new(corev1.ConfigMap) },
	{APIVersion: "v1", Kind: "Service"}:                             func() any { return new(corev1.Service) },
	{APIVersion: "apps/v1", Kind: "Deployment"}:                     func() any { return new(appsv1.Deployment) },
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}:          func() any { return new(policyv1.PodDisruptionBudget) },
	{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"}: func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}:     func() any { return new(networkingv1.NetworkPolicy) },
	{APIVersion: "monitoring.coreos.com/v1", Kind: "PodMonitor"}:    func() any { return new(podMonitor) },
}

// podMonitor is the Prometheus Operator's monitoring.coreos.com/v1
// PodMonitor with the fields these manifests use, named and typed as in
// the operator's pkg/apis/monitoring/v1 (podmonitor_types.go, types.go), so
// strict decoding refuses a misspelled field without the operator's module.
// A real field missing here fails too: add it, spelled as the operator does.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		PodTargetLabels   []string             `json:"podTargetLabels,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		PodMetricsEndpoints []podMetricsEndpoint `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type podMetricsEndpoint struct {
	Port                 string          `json:"port,omitempty"`
	Path                 string          `json:"path,omitempty"`
	Scheme               string          `json:"scheme,omitempty"`
	Interval             string          `json:"interval,omitempty"`
	ScrapeTimeout        string          `json:"scrapeTimeout,omitempty"`
	HonorLabels          bool            `json:"honorLabels,omitempty"`
	RelabelConfigs       []relabelConfig `json:"relabelings,omitempty"`
	MetricRelabelConfigs []relabelConfig `json:"metricRelabelings,omitempty"`
}

type relabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    *string  `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  *string  `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// relabelActions are the actions the operator's CRD accepts, lower case
// (it takes each capitalised as well).
var relabelActions = []string{"replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase", "keepequal", "dropequal"}

// decodeStrict decodes one YAML document as kubectl and the API server read
// it with strict field validation: YAML to JSON (a duplicate key fails),
// then JSON into the kind's Go type case-sensitively, where a field the
// type lacks fails, and so does a value of the wrong type. It returns nil
// for a document with no object (only comments).
func decodeStrict(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if string(js) == "null" {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return nil, err
	}
	newObject, ok := apiTypes[tm]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests hold", tm.APIVersion, tm.Kind)
	}
	obj := newObject()
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	return obj, nil
}

// decodeAll decodes every document of a YAML stream strictly.
func decodeAll(data []byte) ([]any, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			return nil, err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
}

// manifests are the objects of one rendered kustomization, by kind.
type manifests struct {
	kinds       []string
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	netpols     []*networkingv1.NetworkPolicy
	monitors    []*podMonitor
}

func newManifests(objs []any) *manifests {
	m := &manifests{}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *corev1.ConfigMap:
			m.configMaps = append(m.configMaps, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpas = append(m.hpas, o)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, o)
		case *podMonitor:
			m.monitors = append(m.monitors, o)
		}
		kind := o.(interface {
			GroupVersionKind() schema.GroupVersionKind
		}).GroupVersionKind().Kind
		if !slices.Contains(m.kinds, kind) {
			m.kinds = append(m.kinds, kind)
		}
	}
	slices.Sort(m.kinds)
	return m
}

// render runs `kubectl kustomize` on a directory under deploy/kubernetes
// and returns what it prints.
func render(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl renders the kustomizations (kubectl kustomize) and is not installed: %v", err)
	}
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

// TestKubernetesFilesAreRendered decodes every file under deploy/kubernetes
// as it is, strictly (kustomize would pass a duplicate key or an unknown
// field through), and checks each is a resource of its kustomization.
func TestKubernetesFilesAreRendered(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(kubernetesDir, "*", "*.yaml"))
	for _, file := range files {
		dir, name := filepath.Split(file)
		if name == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeAll(data); err != nil {
			t.Errorf("%s: %v", file, err)
		}
		var k struct{ Resources []string }
		kdata, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err == nil {
			err = yaml.Unmarshal(kdata, &k)
		}
		if err != nil || !slices.Contains(k.Resources, name) {
			t.Errorf("%s: not a resource of %skustomization.yaml (%v)", file, dir, err)
		}
	}
	if len(files) < 8 {
		t.Errorf("found %d manifests", len(files))
	}
}

// misspellings are edits of the real manifests that a cluster with strict
// field validation refuses (kubectl's default): each must fail decoding.
var misspellings = []struct{ file, from, to string }{
	{"sidecar/deployment.yaml", "restartPolicy: Always #", "restartpolicy: Always #"}, // case: encoding/json alone would take it
	{"sidecar/deployment.yaml", "preStop:", "preStopHook:"},
	{"gateway/hpa.yaml", "averageUtilization", "averageUtilisation"},
	{"gateway/deployment.yaml", "topologySpreadConstraints:", "topologySpreadConstraint:"},
	{"gateway/pdb.yaml", "  maxUnavailable: 1\n", "  maxUnavailable: 1\n  maxUnavailable: 2\n"}, // a duplicate key
	{"gateway/service.yaml", "port: 80,", `port: "80",`},                                        // a string for an int32
	{"sidecar/networkpolicy.yaml", "networking.k8s.io/v1", "networking.k8s.io/v1beta1"},         // a version the API no longer serves
	{"monitoring/podmonitor.yaml", "podMetricsEndpoints", "podMetricEndpoints"},
	{"monitoring/podmonitor.yaml", "targetLabel: job", "target_label: job"}, // Prometheus's own spelling, not the operator's
}

// TestStrictDecodingRefusesMisspellings proves the decoding strict: each
// real file decodes as it is and fails with one misspelled field.
func TestStrictDecodingRefusesMisspellings(t *testing.T) {
	for _, tt := range misspellings {
		t.Run(tt.file+"/"+tt.to, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(kubernetesDir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeAll(data); err != nil {
				t.Fatalf("as it is: %v", err)
			}
			broken := strings.Replace(string(data), tt.from, tt.to, 1)
			if broken == string(data) {
				t.Fatalf("%q is not in the file", tt.from)
			}
			if _, err := decodeAll([]byte(broken)); err == nil {
				t.Errorf("%q for %q decoded without an error", tt.to, tt.from)
			} else {
				t.Log(err)
			}
		})
	}
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

// setArg replaces the container's --name=... arg.
func setArg(c *corev1.Container, name, value string) {
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--"+name+"=") {
			c.Args[i] = "--" + name + "=" + value
		}
	}
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
