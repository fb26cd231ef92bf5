package deploytest

// A pod's containers, flags and stop hooks, as the chart's checks and the
// manifests' checks both read them.

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// cutMargin is how long ttftlens may take after --shutdown-grace to cut
// what is still running (proxy.cutWait, twice) and exit.
const cutMargin = 5 * time.Second

// containers are a pod's init containers (native sidecars among them) and
// its containers.
func containers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// nativeSidecar reports whether c is a native sidecar: an init container
// with restartPolicy Always, stopped only after the pod's containers.
func nativeSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// flagValue returns the value of --name in args, given as --name=value.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// preStopSleep is how long a container's preStop hook sleeps: the sleep
// action, or an exec of sleep.
func preStopSleep(c *corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return time.Duration(h.Sleep.Seconds) * time.Second
	case h.Exec != nil && len(h.Exec.Command) == 2 && h.Exec.Command[0] == "sleep":
		n, _ := strconv.Atoi(h.Exec.Command[1])
		return time.Duration(n) * time.Second
	}
	return 0
}

// setArg replaces the container's --name=... arg.
func setArg(c *corev1.Container, name, value string) {
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--"+name+"=") {
			c.Args[i] = "--" + name + "=" + value
		}
	}
}
