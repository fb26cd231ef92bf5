//go:build integration

package deploytest

// The checks of the manifests' references: what a cluster would refuse, or
// run otherwise than the manifests' comments say.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const proxyName = "ttftlens" // the ttftlens container's name in every pod

// relabelActions are the actions the operator's CRD accepts, lower case
// (it takes each capitalised as well).
var relabelActions = []string{"replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase", "keepequal", "dropequal"}

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

// hasPort reports whether the container declares port, by name or number.
func hasPort(c *corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
			return true
		}
	}
	return false
}

// podHasPort reports whether any container of the pod declares port.
func podHasPort(spec *corev1.PodSpec, port intstr.IntOrString) bool {
	return slices.ContainsFunc(containers(spec), func(c *corev1.Container) bool { return hasPort(c, port) })
}

// handlerPorts are the ports the kubelet calls on a container: its probes'
// and its lifecycle hooks', by what calls them.
func handlerPorts(c *corev1.Container) map[string]intstr.IntOrString {
	out := map[string]intstr.IntOrString{}
	for what, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		switch {
		case p == nil:
		case p.HTTPGet != nil:
			out[what] = p.HTTPGet.Port
		case p.TCPSocket != nil:
			out[what] = p.TCPSocket.Port
		case p.GRPC != nil:
			out[what] = intstr.FromInt32(p.GRPC.Port)
		}
	}
	if c.Lifecycle != nil {
		for what, h := range map[string]*corev1.LifecycleHandler{"preStop": c.Lifecycle.PreStop, "postStart": c.Lifecycle.PostStart} {
			switch {
			case h == nil:
			case h.HTTPGet != nil:
				out[what] = h.HTTPGet.Port
			case h.TCPSocket != nil:
				out[what] = h.TCPSocket.Port
			}
		}
	}
	return out
}

// selected are the Deployments whose pods sel selects.
func (m *manifests) selected(sel *metav1.LabelSelector) ([]*appsv1.Deployment, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, err
	}
	var out []*appsv1.Deployment
	for _, d := range m.deployments {
		if s.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out, nil
}

// problems are what a cluster would refuse or do differently than the
// manifests' comments say, checked from the objects alone: names and labels
// the API server validates, and the references between objects.
func (m *manifests) problems() []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	meta := func(kind string, o *metav1.ObjectMeta) {
		for _, msg := range validation.IsDNS1123Subdomain(o.Name) {
			add("%s %q: name: %s", kind, o.Name, msg)
		}
		for _, e := range metav1validation.ValidateLabels(o.Labels, field.NewPath("metadata", "labels")) {
			add("%s %s: %v", kind, o.Name, e)
		}
	}
	// selects checks a selector of another object picks at least one pod
	// here, and that those pods declare the ports it names. A port name
	// must be a regular container's: Services resolve a native sidecar's
	// port names only from Kubernetes 1.32, and some network plugins never
	// do for NetworkPolicies, so a sidecar's ports go by number.
	selects := func(what string, sel *metav1.LabelSelector, ports []intstr.IntOrString) {
		deps, err := m.selected(sel)
		if err != nil {
			add("%s: selector: %v", what, err)
			return
		}
		if len(deps) == 0 {
			add("%s: selector %v selects no pod", what, metav1.FormatLabelSelector(sel))
		}
		for _, d := range deps {
			spec := &d.Spec.Template.Spec
			for _, p := range ports {
				regular := slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return hasPort(&c, p) })
				switch {
				case !podHasPort(spec, p):
					add("%s: port %s is on no container of Deployment %s", what, p.String(), d.Name)
				case p.Type == intstr.String && !regular:
					add("%s: port name %s is an init container's in Deployment %s: give its number", what, p.String(), d.Name)
				}
			}
		}
	}

	for _, d := range m.deployments {
		meta("Deployment", &d.ObjectMeta)
		spec := &d.Spec.Template.Spec
		what := "Deployment " + d.Name
		for _, e := range metav1validation.ValidateLabels(d.Spec.Template.Labels, field.NewPath("spec", "template", "metadata", "labels")) {
			add("%s: %v", what, e)
		}
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			add("%s: selector %v does not select its own pods", what, metav1.FormatLabelSelector(d.Spec.Selector))
		}
		portNames := map[string]bool{}
		for _, c := range containers(spec) {
			for _, msg := range validation.IsDNS1123Label(c.Name) {
				add("%s: container %q: %s", what, c.Name, msg)
			}
			for _, p := range c.Ports {
				for _, msg := range validation.IsValidPortName(p.Name) {
					add("%s: container %s: port name %q: %s", what, c.Name, p.Name, msg)
				}
				if portNames[p.Name] {
					add("%s: port name %q twice in the pod", what, p.Name)
				}
				portNames[p.Name] = true
			}
			for by, port := range handlerPorts(c) {
				if !hasPort(c, port) {
					add("%s: container %s: %s calls port %s, which the container does not declare", what, c.Name, by, port.String())
				}
			}
			for _, vm := range c.VolumeMounts {
				if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) {
					add("%s: container %s mounts volume %q, which the pod does not have", what, c.Name, vm.Name)
				}
			}
		}
		for _, init := range spec.InitContainers {
			if init.RestartPolicy != nil && *init.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				add("%s: init container %s: restartPolicy %s (only Always, for a sidecar)", what, init.Name, *init.RestartPolicy)
			}
		}
		for _, tsc := range spec.TopologySpreadConstraints {
			if s, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector); err != nil || !s.Matches(labels.Set(d.Spec.Template.Labels)) {
				add("%s: topology spread over %s counts pods other than its own (%v)", what, tsc.TopologyKey, metav1.FormatLabelSelector(tsc.LabelSelector))
			}
		}
		for _, v := range spec.Volumes {
			if v.ConfigMap != nil && !slices.ContainsFunc(m.configMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == v.ConfigMap.Name }) {
				add("%s: volume %s: no ConfigMap %q here", what, v.Name, v.ConfigMap.Name)
			}
		}
		if proxy := findContainer(spec, proxyName); proxy != nil {
			errs = append(errs, m.proxyProblems(d, proxy)...)
		}
	}
	for _, s := range m.services {
		meta("Service", &s.ObjectMeta)
		if len(s.Spec.Selector) == 0 {
			add("Service %s: no selector", s.Name)
			continue
		}
		var ports []intstr.IntOrString
		for _, p := range s.Spec.Ports {
			ports = append(ports, p.TargetPort)
		}
		selects("Service "+s.Name, metav1.SetAsLabelSelector(s.Spec.Selector), ports)
	}
	for _, cm := range m.configMaps {
		meta("ConfigMap", &cm.ObjectMeta)
	}
	for _, p := range m.pdbs {
		meta("PodDisruptionBudget", &p.ObjectMeta)
		selects("PodDisruptionBudget "+p.Name, p.Spec.Selector, nil)
	}
	for _, np := range m.netpols {
		meta("NetworkPolicy", &np.ObjectMeta)
		var ports []intstr.IntOrString
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil {
					ports = append(ports, *p.Port)
				}
			}
		}
		selects("NetworkPolicy "+np.Name, &np.Spec.PodSelector, ports)
	}
	for _, pm := range m.monitors {
		meta("PodMonitor", &pm.ObjectMeta)
	}
	for _, h := range m.hpas {
		meta("HorizontalPodAutoscaler", &h.ObjectMeta)
		errs = append(errs, m.hpaProblems(h)...)
	}
	return errs
}

// hpaProblems checks an autoscaler's target is a Deployment here that
// leaves it the replica count and requests the CPU its utilization is
// measured against.
func (m *manifests) hpaProblems(h *autoscalingv2.HorizontalPodAutoscaler) []error {
	what := "HorizontalPodAutoscaler " + h.Name
	ref := h.Spec.ScaleTargetRef
	i := slices.IndexFunc(m.deployments, func(d *appsv1.Deployment) bool { return d.Name == ref.Name })
	if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || i < 0 {
		return []error{fmt.Errorf("%s: target %s %s %s is not a Deployment here", what, ref.APIVersion, ref.Kind, ref.Name)}
	}
	d := m.deployments[i]
	var errs []error
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
		errs = append(errs, fmt.Errorf("%s: minReplicas under 2: one pod is no gateway to depend on", what))
	}
	if d.Spec.Replicas != nil {
		errs = append(errs, fmt.Errorf("%s: Deployment %s states replicas, which every kubectl apply resets under the autoscaler", what, d.Name))
	}
	for _, metric := range h.Spec.Metrics {
		if metric.Resource == nil || metric.Resource.Name != corev1.ResourceCPU || metric.Resource.Target.Type != autoscalingv2.UtilizationMetricType {
			continue
		}
		for _, c := range containers(&d.Spec.Template.Spec) {
			if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
				errs = append(errs, fmt.Errorf("%s: CPU utilization of Deployment %s, whose container %s requests no CPU", what, d.Name, c.Name))
			}
		}
	}
	return errs
}

func findContainer(spec *corev1.PodSpec, name string) *corev1.Container {
	i := slices.IndexFunc(containers(spec), func(c *corev1.Container) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return containers(spec)[i]
}

// proxyProblems checks the ttftlens container against its pod: the ports
// it listens on are the ones it declares, the probes split as the
// manifests say, its config file comes from a ConfigMap key, and the grace
// periods fit together.
func (m *manifests) proxyProblems(d *appsv1.Deployment, c *corev1.Container) []error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("Deployment %s: %s: "+format, append([]any{d.Name, c.Name}, a...)...))
	}
	spec := &d.Spec.Template.Spec
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		add("args %v do not start with serve", c.Args)
	}
	// The ports it listens on are the ports it declares.
	for flag, port := range map[string]string{"listen": "http", "admin-listen": "admin"} {
		addr, ok := flagValue(c.Args, flag)
		if !ok {
			add("no --%s=ADDR: the default does not listen beyond loopback or is not stated", flag)
			continue
		}
		_, p, err := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		if err != nil || !hasPort(c, intstr.FromString(port)) || !hasPort(c, intstr.FromInt32(int32(n))) || portNumber(c, port) != int32(n) {
			add("--%s=%s is not the port named %s", flag, addr, port)
		}
	}
	// Readiness on the client listener; liveness on the admin listener,
	// and on no other container: a loading engine restarts nothing.
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Port != intstr.FromString("http") {
		add("readiness is not probed on the client port")
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Port != intstr.FromString("admin") {
		add("liveness is not probed on the admin port")
	}
	for _, other := range containers(spec) {
		if other.Name == c.Name {
			continue
		}
		if other.LivenessProbe != nil {
			add("container %s has a liveness probe: only the proxy's is wanted", other.Name)
		}
		if other.ReadinessProbe == nil {
			add("container %s has no readiness probe: a pod whose engine is loading would get clients", other.Name)
		}
	}
	// An upstream on loopback is a port of another container in the pod.
	if up, ok := flagValue(c.Args, "upstream"); ok {
		if host, p, err := upstreamHostPort(up); err == nil && (host == "127.0.0.1" || host == "localhost") {
			n, _ := strconv.Atoi(p)
			if hasPort(c, intstr.FromInt32(int32(n))) || !podHasPort(spec, intstr.FromInt32(int32(n))) {
				add("--upstream=%s: no other container of the pod declares port %d", up, n)
			}
		}
	}
	errs = append(errs, m.configProblems(d, c)...)
	// Grace periods.
	graceArg, ok := flagValue(c.Args, "shutdown-grace")
	grace, err := time.ParseDuration(graceArg)
	if !ok || err != nil {
		add("no --shutdown-grace=DURATION: the pod's termination grace is sized from it")
		return errs
	}
	if spec.TerminationGracePeriodSeconds == nil {
		add("no terminationGracePeriodSeconds")
		return errs
	}
	podGrace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	if need := preStopSleep(c) + grace + cutMargin; podGrace < need {
		add("terminationGracePeriodSeconds %v < preStop %v + --shutdown-grace %v + %v to cut and exit", podGrace, preStopSleep(c), grace, cutMargin)
	}
	for _, engine := range containers(spec) {
		timeout, ok := flagValue(engine.Args, "shutdown-timeout") // vLLM's drain, in seconds
		if engine.Name == c.Name || !ok {
			continue
		}
		secs, _ := strconv.Atoi(timeout)
		drain := preStopSleep(engine) + time.Duration(secs)*time.Second
		if grace < drain {
			add("--shutdown-grace %v < %s's preStop and drain %v: stopped together, the proxy would cut streams it finishes", grace, engine.Name, drain)
		}
		if podGrace < drain {
			add("terminationGracePeriodSeconds %v < %s's preStop and drain %v", podGrace, engine.Name, drain)
		}
	}
	for _, err := range spanProblems(spec, c) {
		add("%v", err)
	}
	return errs
}

func portNumber(c *corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func upstreamHostPort(raw string) (host, port string, err error) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "", "", fmt.Errorf("%q: no scheme", raw)
	}
	hostport, _, _ := strings.Cut(rest, "/")
	return net.SplitHostPort(hostport)
}

// configProblems checks --config names a file in a ConfigMap mounted as a
// directory (the kubelet updates such a mount by a symlink swap; a subPath
// mount is never updated), and that the ConfigMap holds no key the args do
// not name.
func (m *manifests) configProblems(d *appsv1.Deployment, c *corev1.Container) []error {
	path, ok := flagValue(c.Args, "config")
	if !ok {
		return nil
	}
	fail := func(format string, a ...any) []error {
		return []error{fmt.Errorf("Deployment %s: %s: --config=%s: "+format, append([]any{d.Name, c.Name, path}, a...)...)}
	}
	for _, vm := range c.VolumeMounts {
		if filepath.Dir(path) != vm.MountPath {
			continue
		}
		if vm.SubPath != "" {
			return fail("mounted with subPath %q, which the kubelet never updates", vm.SubPath)
		}
		i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 || d.Spec.Template.Spec.Volumes[i].ConfigMap == nil {
			return fail("volume %s is not a ConfigMap", vm.Name)
		}
		name := d.Spec.Template.Spec.Volumes[i].ConfigMap.Name
		j := slices.IndexFunc(m.configMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == name })
		if j < 0 {
			return fail("no ConfigMap %s here", name)
		}
		var errs []error
		for key := range m.configMaps[j].Data {
			if key != filepath.Base(path) {
				errs = append(errs, fail("ConfigMap %s has key %q, which no arg names", name, key)...)
			}
		}
		if _, ok := m.configMaps[j].Data[filepath.Base(path)]; !ok {
			errs = append(errs, fail("ConfigMap %s has no key %q", name, filepath.Base(path))...)
		}
		return errs
	}
	return fail("no volume is mounted at %s", filepath.Dir(path))
}

// monitorProblems checks each PodMonitor against the pods of every
// rendered kustomization: it selects some, each endpoint's port is on one
// of them, its settings are values the operator takes, and the admin port's
// job is the one the alerts watch.
func monitorProblems(pm *podMonitor, pods *manifests, alerts string) []error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("PodMonitor %s: "+format, append([]any{pm.Name}, a...)...))
	}
	deps, err := pods.selected(&pm.Spec.Selector)
	if err != nil || len(deps) == 0 {
		add("selector %v selects no pod (%v)", metav1.FormatLabelSelector(&pm.Spec.Selector), err)
	}
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if !slices.ContainsFunc(deps, func(d *appsv1.Deployment) bool { return podHasPort(&d.Spec.Template.Spec, intstr.FromString(ep.Port)) }) {
			add("port %q is on none of the pods it selects", ep.Port)
		}
		for _, d := range []string{ep.Interval, ep.ScrapeTimeout} {
			if _, err := model.ParseDuration(d); d != "" && err != nil {
				add("port %s: %v", ep.Port, err)
			}
		}
		job := ""
		for _, r := range append(ep.RelabelConfigs, ep.MetricRelabelConfigs...) {
			if r.Action != "" && !slices.Contains(relabelActions, strings.ToLower(r.Action)) {
				add("port %s: relabel action %q", ep.Port, r.Action)
			}
			if r.TargetLabel == "job" && r.Replacement != nil {
				job = *r.Replacement
			}
		}
		if ep.Port == "admin" && !strings.Contains(alerts, `job="`+job+`"`) {
			add("the admin port is scraped as job %q, which the alerts never name", job)
		}
	}
	return errs
}

// allProblems are the problems of every rendered kustomization (by
// directory), the --check-config runs of every ttftlens container, and the
// PodMonitors' problems against all the pods rendered.
func allProblems(bin string, rendered map[string]*manifests, alerts string) []error {
	var errs []error
	pods := &manifests{}
	for _, k := range kustomizations {
		m := rendered[k.dir]
		errs = append(errs, m.problems()...)
		for _, d := range m.deployments {
			if c := findContainer(&d.Spec.Template.Spec, proxyName); c != nil {
				if err := checkConfig(bin, m, d, c); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", k.dir, err))
				}
			}
		}
		pods.deployments = append(pods.deployments, m.deployments...)
	}
	for _, m := range rendered {
		for _, pm := range m.monitors {
			errs = append(errs, monitorProblems(pm, pods, alerts)...)
		}
	}
	return errs
}

// checkConfig runs ttftlens serve --check-config with the container's args,
// its ConfigMap volumes written under a temporary root (the args follow),
// and only its environment, a Secret's value standing in for itself.
func checkConfig(bin string, m *manifests, d *appsv1.Deployment, c *corev1.Container) error {
	root, err := os.MkdirTemp("", "ttftlens-k8s-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	args := slices.Clone(c.Args)
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 || d.Spec.Template.Spec.Volumes[i].ConfigMap == nil {
			continue
		}
		dir := filepath.Join(root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, cm := range m.configMaps {
			if cm.Name != d.Spec.Template.Spec.Volumes[i].ConfigMap.Name {
				continue
			}
			for key, content := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, key), []byte(content), 0o644); err != nil {
					return err
				}
			}
		}
		for j, a := range args {
			args[j] = strings.Replace(a, "="+vm.MountPath+"/", "="+dir+"/", 1)
		}
	}
	cmd := exec.Command(bin, append(args, "--check-config")...)
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			v = "secret " + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("flags ok")) {
		return fmt.Errorf("Deployment %s: ttftlens %s --check-config: %v\n%s", d.Name, strings.Join(c.Args, " "), err, out)
	}
	return nil
}
