// Package deploytest checks what is under deploy/ against real software:
// the Grafana dashboard's every query and the Prometheus rules, evaluated by
// a real Prometheus server that scrapes ttftlens (in front of the reference
// engine) under load; the dashboard against Grafana's own model (the
// Grafana Foundation SDK); the Kubernetes manifests, rendered by kubectl
// kustomize, and the Helm chart, rendered and linted by Helm's own
// packages, their objects decoded strictly into the Kubernetes API's own Go
// types; and the images' recipes, the one FROM scratch built and inspected
// by podman.
//
// It is a module of its own (the repository's go.work adds it), so that
// Helm's and the Kubernetes API's modules stay out of the proxy's go.mod;
// `go test ./...` at the root does not reach it: run
// `go test ./deploy/deploytest/...`. The tests that start prometheus,
// podman or kubectl build with the integration tag (scripts/test.sh
// installs those programs when they are missing).
package deploytest
