package deploytest

import (
	"encoding/json"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/ttftlens"

// chartValueSets are the values the chart is rendered with: its defaults,
// every documented example, and overrides that reach the templates'
// other branches.
func chartValueSets(t *testing.T) map[string]map[string]any {
	t.Helper()
	sets := map[string]map[string]any{"default": {}}
	examples, _ := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if len(examples) < 3 {
		t.Fatalf("found %d example values files, want the gateway's and the sidecar's (native and plain)", len(examples))
	}
	for _, f := range examples {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sets["examples/"+filepath.Base(f)] = v
	}
	sets["gateway, fixed replicas, no policy, no preStop"] = map[string]any{
		"gateway":             map[string]any{"autoscaling": map[string]any{"enabled": false}},
		"networkPolicy":       map[string]any{"enabled": false},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"shutdown":            map[string]any{"preStopSleepSeconds": 0},
	}
	sets["gateway receiving spans, one replica"] = map[string]any{
		"ttftlens": map[string]any{"receiveSpans": map[string]any{"enabled": true}},
		"gateway":  map[string]any{"replicas": 1, "autoscaling": map[string]any{"enabled": false}},
	}
	return sets
}

// renderChart renders the chart as `helm template` does, after the values
// schema check `helm install` makes.
func renderChart(chrt *chart.Chart, vals map[string]any) (map[string]string, error) {
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: "ttftlens", Namespace: "default", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(chrt, top)
}

// renderedObjects are one rendering's objects, each decoded strictly.
type renderedObjects struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	policies    []*networkingv1.NetworkPolicy
	monitors    []*monitoringv1.ServiceMonitor
}

func decodeChart(t *testing.T, files map[string]string) renderedObjects {
	t.Helper()
	objs := renderedObjects{configMaps: map[string]*corev1.ConfigMap{}}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if filepath.Ext(name) != ".yaml" {
			continue // NOTES.txt, _helpers.tpl
		}
		for _, doc := range releaseutil.SplitManifests(files[name]) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if m == nil {
				continue // a template switched off by the values
			}
			obj, err := decodeChartObject([]byte(doc))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				objs.deployments = append(objs.deployments, o)
			case *corev1.Service:
				objs.services = append(objs.services, o)
			case *corev1.ConfigMap:
				objs.configMaps[o.Name] = o
			case *policyv1.PodDisruptionBudget:
				objs.pdbs = append(objs.pdbs, o)
			case *autoscalingv2.HorizontalPodAutoscaler:
				objs.hpas = append(objs.hpas, o)
			case *networkingv1.NetworkPolicy:
				objs.policies = append(objs.policies, o)
			case *monitoringv1.ServiceMonitor:
				objs.monitors = append(objs.monitors, o)
			}
		}
	}
	return objs
}

// TestHelmChart renders deploy/helm/ttftlens with Helm's own template
// engine for its default values, every example values file and a few
// overrides; lints it as `helm lint` does; decodes every object strictly
// into the Kubernetes API's Go types; checks the references between the
// objects as the cluster would resolve them; and runs the real binary's
// `serve --check-config` on the ttftlens container's args, environment and
// mounted config file.
func TestHelmChart(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ttftlens")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ttftlens").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for name, vals := range chartValueSets(t) {
		t.Run(name, func(t *testing.T) {
			for _, msg := range lint.AllWithKubeVersion(chartDir, vals, "default", nil).Messages {
				if msg.Severity > support.InfoSev {
					t.Errorf("helm lint: %v", msg)
				} else {
					t.Logf("helm lint: %v", msg) // "icon is recommended": an icon is a URL
				}
			}
			files, err := renderChart(chrt, vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs := decodeChart(t, files)
			if len(objs.deployments) != 1 || len(objs.services) != 1 {
				t.Fatalf("rendered %d Deployments and %d Services, want one of each", len(objs.deployments), len(objs.services))
			}
			final, err := chartutil.CoalesceValues(chrt, vals)
			if err != nil {
				t.Fatal(err)
			}
			// An object switched on is rendered, once.
			for path, n := range map[string]int{
				"networkPolicy.enabled":          len(objs.policies),
				"podDisruptionBudget.enabled":    len(objs.pdbs),
				"metrics.serviceMonitor.enabled": len(objs.monitors),
			} {
				if on, _ := final.PathValue(path); (on == true) != (n == 1) || n > 1 {
					t.Errorf("%s is %v: rendered %d", path, on, n)
				}
			}
			mode, _ := final.PathValue("mode")
			c := chartCheck{t: t, objs: objs, deploy: objs.deployments[0], mode: mode.(string), values: final}
			c.pod()
			c.shutdown()
			c.service()
			c.others()
			c.checkConfig(bin)
		})
	}
}

// chartCheck checks one rendering's objects against each other.
type chartCheck struct {
	t      *testing.T
	objs   renderedObjects
	deploy *appsv1.Deployment
	mode   string
	values chartutil.Values // the defaults with the rendering's values over them
}

func (c *chartCheck) podSpec() *corev1.PodSpec { return &c.deploy.Spec.Template.Spec }

func (c *chartCheck) podLabels() map[string]string { return c.deploy.Spec.Template.Labels }

// ttftlens is the ttftlens container, wherever the mode puts it.
func (c *chartCheck) ttftlens() *corev1.Container {
	spec := c.podSpec()
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			if list[i].Name == "ttftlens" {
				return &list[i]
			}
		}
	}
	c.t.Fatal("no ttftlens container")
	return nil
}

// flag is the value of --name=value in the ttftlens container's args.
func (c *chartCheck) flag(name string) (string, bool) { return flagValue(c.ttftlens().Args, name) }

// containerPort is the port named name in container ct.
func containerPort(ct *corev1.Container, name string) (int32, bool) {
	for _, p := range ct.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// podPorts are the pod's container ports, by number; sidecars' included.
func (c *chartCheck) podPorts() map[int32]bool {
	ports := map[int32]bool{}
	spec := c.podSpec()
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range ct.Ports {
			ports[p.ContainerPort] = true
		}
	}
	return ports
}

// pod checks the Deployment's pod: the selector, where ttftlens runs in
// each mode, the listen flags against the declared ports, and every
// probe's port in its own container.
func (c *chartCheck) pod() {
	t, spec := c.t, c.podSpec()
	if !chartSelects(t, c.deploy.Spec.Selector, c.podLabels()) {
		t.Errorf("Deployment selector %v does not select its pods' labels %v", c.deploy.Spec.Selector, c.podLabels())
	}
	tl := c.ttftlens()
	native := tl.RestartPolicy != nil && *tl.RestartPolicy == corev1.ContainerRestartPolicyAlways
	switch {
	case c.mode == "gateway" && (len(spec.Containers) != 1 || len(spec.InitContainers) != 0):
		t.Errorf("gateway pod: %d containers, %d init containers; want ttftlens alone", len(spec.Containers), len(spec.InitContainers))
	case c.mode == "sidecar" && len(spec.InitContainers) > 0 && !native:
		t.Errorf("sidecar: ttftlens is an init container without restartPolicy Always: the engine would never start")
	case c.mode == "sidecar" && len(spec.InitContainers)+len(spec.Containers) != 2:
		t.Errorf("sidecar pod: %d init containers, %d containers; want the engine and ttftlens", len(spec.InitContainers), len(spec.Containers))
	}
	if c.mode == "sidecar" {
		engine := &spec.Containers[0]
		up, _ := c.flag("upstream")
		port, ok := containerPort(engine, "engine")
		if !ok || up != "http://127.0.0.1:"+strconv.Itoa(int(port)) {
			t.Errorf("--upstream=%s, want the engine container's port %d on localhost", up, port)
		}
		if engine.StartupProbe == nil || engine.ReadinessProbe == nil {
			t.Errorf("engine %s: no startup or readiness probe: a pod still loading its model would get clients", engine.Name)
		}
	}
	for flagName, portName := range map[string]string{"listen": "http", "admin-listen": "admin"} {
		addr, _ := c.flag(flagName)
		_, port, err := net.SplitHostPort(addr)
		want, ok := containerPort(tl, portName)
		if err != nil || !ok || port != strconv.Itoa(int(want)) {
			t.Errorf("--%s=%s, want the %s port %d (declared: %v)", flagName, addr, portName, want, ok)
		}
	}
	if p := tl.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("ttftlens liveness %+v: want /health on the admin port (the proxy alone, never the upstream)", p)
	}
	if p := tl.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "http" {
		t.Errorf("ttftlens readiness %+v: want /health on the clients' port", p)
	}
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		for kind, p := range map[string]*corev1.Probe{"startup": ct.StartupProbe, "readiness": ct.ReadinessProbe, "liveness": ct.LivenessProbe} {
			if p == nil {
				continue
			}
			if p.HTTPGet == nil {
				t.Errorf("%s %s probe: not an httpGet", ct.Name, kind)
				continue
			}
			c.checkProbePort(&ct, kind, p.HTTPGet.Port)
		}
	}
}

// checkProbePort: the kubelet resolves a probe's named port in the probed
// container only.
func (c *chartCheck) checkProbePort(ct *corev1.Container, kind string, port intstr.IntOrString) {
	if port.Type == intstr.String {
		if _, ok := containerPort(ct, port.StrVal); !ok {
			c.t.Errorf("%s %s probe: port %q is not a port of that container", ct.Name, kind, port.StrVal)
		}
		return
	}
	if !slices.ContainsFunc(ct.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port.IntVal }) {
		c.t.Errorf("%s %s probe: port %d is not a port of that container", ct.Name, kind, port.IntVal)
	}
}

// shutdown: the kubelet's SIGKILL comes terminationGracePeriodSeconds
// after the pod's deletion; the preStop sleep and then --shutdown-grace
// must both fit before it.
func (c *chartCheck) shutdown() {
	t, spec := c.t, c.podSpec()
	graceFlag, _ := c.flag("shutdown-grace")
	grace, err := time.ParseDuration(graceFlag)
	if err != nil {
		t.Fatalf("--shutdown-grace=%q: %v", graceFlag, err)
	}
	var preStop time.Duration
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		if ct.Lifecycle == nil || ct.Lifecycle.PreStop == nil {
			continue
		}
		if ct.Lifecycle.PreStop.Sleep == nil {
			t.Errorf("%s: a preStop hook other than sleep (the ttftlens image has no shell)", ct.Name)
			continue
		}
		preStop = max(preStop, time.Duration(ct.Lifecycle.PreStop.Sleep.Seconds)*time.Second)
	}
	var tgps time.Duration // unset: the default, 30 s
	if p := spec.TerminationGracePeriodSeconds; p != nil {
		tgps = time.Duration(*p) * time.Second
	}
	if tgps <= preStop+grace {
		t.Errorf("terminationGracePeriodSeconds %v: not above the preStop sleep %v plus --shutdown-grace %v", tgps, preStop, grace)
	}
	// With spans received, --shutdown-grace holds the streams' grace and
	// then the last record's wait for its span.
	if waitFlag, on := c.flag("receive-otlp-wait"); on {
		wait, _ := time.ParseDuration(waitFlag)
		streams, _ := c.values.PathValue("shutdown.graceSeconds")
		if want := time.Duration(toInt(streams))*time.Second + wait; grace < want {
			t.Errorf("--shutdown-grace %v < shutdown.graceSeconds %vs + --receive-otlp-wait %v: a stream ending late would leave its record no time for its span", grace, streams, wait)
		}
	}
	for _, err := range spanProblems(spec, c.ttftlens()) {
		t.Error(err)
	}
}

// toInt is a numeric value of the chart's values (an int, or a float64
// from JSON).
func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return 0
}

// service: its selector selects the pods, and every targetPort resolves
// as the endpoints controller resolves it: a number among the pod's ports,
// a name among the ports of spec.containers (not of native sidecars,
// before Kubernetes 1.32).
func (c *chartCheck) service() {
	t, svc := c.t, c.objs.services[0]
	if !chartSelects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, c.podLabels()) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, c.podLabels())
	}
	ports := c.podPorts()
	for _, p := range svc.Spec.Ports {
		tp := p.TargetPort
		switch {
		case tp.Type == intstr.Int && !ports[tp.IntVal]:
			t.Errorf("Service port %s: targetPort %d is no container port of the pod", p.Name, tp.IntVal)
		case tp.Type == intstr.String && !slices.ContainsFunc(c.podSpec().Containers, func(ct corev1.Container) bool {
			_, ok := containerPort(&ct, tp.StrVal)
			return ok
		}):
			t.Errorf("Service port %s: targetPort %q is no named port of the pod's containers", p.Name, tp.StrVal)
		}
	}
	http, _ := containerPort(c.ttftlens(), "http")
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" && p.TargetPort.IntVal == http }) {
		t.Errorf("Service: no port http to ttftlens' clients' port %d", http)
	}
}

// others: the PodDisruptionBudget, the HorizontalPodAutoscaler, the
// NetworkPolicy, the topology spread and the ServiceMonitor each reach
// what they name.
func (c *chartCheck) others() {
	t, pod := c.t, c.podLabels()
	for _, pdb := range c.objs.pdbs {
		if !chartSelects(t, pdb.Spec.Selector, pod) {
			t.Errorf("PodDisruptionBudget %s selects none of the pods", pdb.Name)
		}
	}
	for _, tsc := range c.podSpec().TopologySpreadConstraints {
		if !chartSelects(t, tsc.LabelSelector, pod) {
			t.Errorf("topology spread over %s: its labelSelector does not count the pods themselves", tsc.TopologyKey)
		}
	}
	for _, hpa := range c.objs.hpas {
		ref := hpa.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != c.deploy.Name {
			t.Errorf("HorizontalPodAutoscaler %s scales %+v, not the Deployment %s", hpa.Name, ref, c.deploy.Name)
		}
		if c.deploy.Spec.Replicas != nil {
			t.Errorf("the Deployment sets replicas beside an HPA: every upgrade would reset the autoscaled count")
		}
		for _, ct := range c.podSpec().Containers {
			if ct.Resources.Requests.Cpu().IsZero() {
				t.Errorf("%s has no CPU request: the HPA's CPU utilization is undefined", ct.Name)
			}
		}
	}
	if c.mode == "gateway" && len(c.objs.hpas) == 0 && c.deploy.Spec.Replicas == nil {
		t.Errorf("gateway without an HPA and without replicas")
	}
	admin, _ := containerPort(c.ttftlens(), "admin")
	ports := c.podPorts()
	for _, np := range c.objs.policies {
		if !chartSelects(t, &np.Spec.PodSelector, pod) {
			t.Errorf("NetworkPolicy %s selects none of the pods", np.Name)
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.Type != intstr.Int || !ports[p.Port.IntVal] {
					t.Errorf("NetworkPolicy %s: port %v is no container port of the pod (by number: policies do not resolve a native sidecar's port names everywhere)", np.Name, p.Port)
				}
				if p.Port != nil && p.Port.IntVal == admin && len(rule.From) == 0 {
					t.Errorf("NetworkPolicy %s admits the admin port %d from anywhere", np.Name, admin)
				}
			}
		}
	}
	for _, sm := range c.objs.monitors {
		svc := c.objs.services[0]
		if !chartSelects(t, &sm.Spec.Selector, svc.Labels) {
			t.Errorf("ServiceMonitor %s does not select the Service %s (labels %v)", sm.Name, svc.Name, svc.Labels)
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("ServiceMonitor %s: endpoint port %q is not a port of the Service", sm.Name, ep.Port)
			}
		}
	}
}

// checkConfig runs `ttftlens <args> --check-config` on the ttftlens
// container's args: each ConfigMap the pod mounts is written under a
// temporary root where it is mounted (the args follow it there), the
// container's environment is set, and so is every `env:NAME` the config
// file reads its keys from (envFrom a Secret, in the cluster).
func (c *chartCheck) checkConfig(bin string) {
	t, tl := c.t, c.ttftlens()
	root := t.TempDir()
	args := slices.Clone(tl.Args)
	env := os.Environ()
	volumes := map[string]*corev1.ConfigMap{}
	for _, v := range c.podSpec().Volumes {
		if v.ConfigMap != nil {
			cm, ok := c.objs.configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: no ConfigMap %s in the chart", v.Name, v.ConfigMap.Name)
			}
			volumes[v.Name] = cm
		}
	}
	envRef := regexp.MustCompile(`env:([A-Za-z_][A-Za-z0-9_]*)`)
	for _, vm := range tl.VolumeMounts {
		cm, ok := volumes[vm.Name]
		if !ok {
			continue
		}
		dir := filepath.Join(root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for key, content := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, key), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, m := range envRef.FindAllStringSubmatch(content, -1) {
				env = append(env, m[1]+"=placeholder-"+m[1])
			}
		}
		for i, a := range args {
			args[i] = strings.Replace(a, "="+vm.MountPath+"/", "="+dir+"/", 1)
		}
	}
	if _, ok := c.flag("config"); ok && len(volumes) == 0 {
		t.Errorf("--config without a mounted ConfigMap")
	}
	for _, e := range tl.Env {
		env = append(env, e.Name+"=placeholder-"+e.Name) // a Secret's value, or e.Value
		if e.ValueFrom == nil {
			env[len(env)-1] = e.Name + "=" + e.Value
		}
	}
	cmd := exec.Command(bin, append(args, "--check-config")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flags ok") {
		t.Errorf("ttftlens %s --check-config: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestHelmValuesSchema: values.schema.json refuses what the templates
// would otherwise render into a pod that fails later: a misspelled key, an
// unknown mode, a duration Go cannot parse, an extra arg that is no flag.
// And its list of engines is the one `ttftlens serve` has.
func TestHelmValuesSchema(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string // in the error: the value's path
	}{
		{"misspelled key", map[string]any{"gateway": map[string]any{"replica": 3}}, "replica"},
		{"misspelled top-level key", map[string]any{"netwrokPolicy": map[string]any{"enabled": false}}, "netwrokPolicy"},
		{"unknown mode", map[string]any{"mode": "daemonset"}, "mode"},
		{"not a Go duration", map[string]any{"ttftlens": map[string]any{"firstTokenTimeout": "2 minutes"}}, "firstTokenTimeout"},
		{"extra arg without dashes", map[string]any{"ttftlens": map[string]any{"extraArgs": []any{"heartbeat=15s"}}}, "extraArgs"},
		{"unknown engine", map[string]any{"ttftlens": map[string]any{"engine": "vllm2"}}, "engine"},
		{"admin port open to all", map[string]any{"networkPolicy": map[string]any{"adminFrom": []any{}}}, "adminFrom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := renderChart(chrt, tc.vals); err == nil || !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("rendered %v: %v, want a schema error about %s", tc.vals, err, tc.want)
			}
		})
	}

	var schema struct {
		Properties struct {
			Ttftlens struct {
				Properties struct {
					Engine struct {
						Enum []string `json:"enum"`
					} `json:"engine"`
				} `json:"properties"`
			} `json:"ttftlens"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(chrt.Schema, &schema); err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command("go", "run", "../../cmd/ttftlens", "serve", "-h").CombinedOutput()
	m := regexp.MustCompile(`for reading its timing: ([a-z, ]+) \(auto`).FindSubmatch(help)
	if m == nil {
		t.Fatalf("no engine list in serve -h:\n%s", help)
	}
	engines := strings.Split(string(m[1]), ", ")
	if got := schema.Properties.Ttftlens.Properties.Engine.Enum; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(engines))) {
		t.Errorf("values.schema.json engines %v, serve -h lists %v", got, engines)
	}
}

// TestChartObjectDecodeIsStrict: the decoder the chart's objects pass
// through refuses a misspelled or misplaced field, which a lenient decode
// (and kubectl apply without server-side validation) would drop.
func TestChartObjectDecodeIsStrict(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := renderChart(chrt, nil)
	if err != nil {
		t.Fatal(err)
	}
	deployment := files["ttftlens/templates/deployment.yaml"]
	if _, err := decodeChartObject([]byte(deployment)); err != nil {
		t.Fatalf("the rendered Deployment itself: %v", err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"misspelled field", "readinessProbe:", "readynessProbe:"},
		{"field at the wrong level", "terminationGracePeriodSeconds:", "template2: {}\n      terminationGracePeriodSeconds:"},
		{"duplicate key", "automountServiceAccountToken: false", "automountServiceAccountToken: false\n      automountServiceAccountToken: true"},
		{"wrong type", "automountServiceAccountToken: false", "automountServiceAccountToken: \"no\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(deployment, tc.old, tc.new, 1)
			if bad == deployment {
				t.Fatalf("%q is not in the rendered Deployment", tc.old)
			}
			if _, err := decodeChartObject([]byte(bad)); err == nil {
				t.Errorf("decoded without error:\n%s", bad)
			}
		})
	}
}
