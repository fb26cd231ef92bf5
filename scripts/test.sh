#!/usr/bin/env bash
# The whole test suite. The README gives this command and .ci/run calls it.
# It installs what the tests need when it is missing, so it passes on a
# fresh machine with only Go and the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then # the page's browser test (exporters/web)
	echo "== installing chromium"
	apt-get update && apt-get install -y chromium
fi

# deploy/: promtool for the rules, and the prometheus server the dashboard
# test (deploy/deploytest, run by go test below) starts on its own port,
# config and data directory (never the Debian service's).
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
	echo "== installing prometheus"
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 prometheus
fi
echo "== promtool: deploy/prometheus"
promtool check rules deploy/prometheus/recording.yml deploy/prometheus/alerts.yml
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/alerts_test.yml

echo "== go vet"
go vet ./...
# The allocation budgets (zero per event on the hot path) are built without
# -race, which instruments allocations: run them on their own.
echo "== allocation budgets"
go test -count=1 -run 'Allocs$' ./...
echo "== go test -race"
go test -race -count=1 -timeout 10m $(go list ./... | grep -v '/bench/lab$')
# The proof (bench/lab) measures how a slow first token's time splits: it
# runs on its own, not beside the other packages' compiles and tests, which
# on two cores would be part of what it measures.
echo "== go test -race: the proof (bench/lab)"
go test -race -count=1 -timeout 5m ./bench/lab
