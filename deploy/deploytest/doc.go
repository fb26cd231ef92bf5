// Package deploytest checks what is under deploy/ against real software:
// the Grafana dashboard's every query and the Prometheus rules, evaluated by
// a real Prometheus server that scrapes ttftlens (in front of the reference
// engine) under load; the dashboard against Grafana's own model (the
// Grafana Foundation SDK); the Kubernetes manifests, rendered by kubectl
// kustomize, and the Helm chart, rendered and linted by Helm's own
// packages, their objects decoded strictly into the Kubernetes API's own Go
// types; and the images' recipes, the one FROM scratch built and inspected
// by podman. The tests need the prometheus and podman binaries
// (scripts/test.sh installs Debian's packages when they are missing) and
// kubectl (part of the machine's image).
package deploytest
