// Package deploytest checks what is under deploy/ against real software:
// the Grafana dashboard's every query and the Prometheus rules, evaluated by
// a real Prometheus server that scrapes ttftlens (in front of the reference
// engine) under load. The test needs the prometheus binary; scripts/test.sh
// installs Debian's package when it is missing.
package deploytest
