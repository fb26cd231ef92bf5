package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kubernetesDir holds the kustomizations.
const kubernetesDir = "../kubernetes"

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
