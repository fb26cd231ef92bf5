// Package deploytest checks what is under deploy/ against real software:
// the Grafana dashboard's every query and the Prometheus rules, evaluated by
// a real Prometheus server that scrapes ttftlens (in front of the reference
// engine) under load; and the Kubernetes manifests, rendered by kubectl
// kustomize and decoded strictly into the Kubernetes API's own Go types. The
// tests need the prometheus binary (scripts/test.sh installs Debian's
// package when it is missing) and kubectl (part of the machine's image).
package deploytest
