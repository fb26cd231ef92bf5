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
# proxy/: the nginx the buffering corpus puts between the proxy and an
# engine, started by the test on its own port, configuration and temporary
# directory, in the foreground (never the Debian service).
if ! command -v nginx >/dev/null; then
	echo "== installing nginx"
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 nginx
fi
# gateway/ and proxy/: the redis-server the shared-quota tests start on their own port
# and data directory, without persistence (never the Debian service).
if ! command -v redis-server >/dev/null; then
	echo "== installing redis-server"
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 redis-server
fi
# deploy/: podman builds the image FROM scratch (deploy/deploytest builds
# and inspects it; nothing is pulled and nothing is run).
if ! command -v podman >/dev/null; then
	echo "== installing podman"
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 podman
fi
# deploy/: kubectl renders the kustomizations (kubectl kustomize, offline).
# The machine image has it; elsewhere take the packaged one (Debian's
# kubernetes-client is older: its kustomize may refuse newer fields).
if ! command -v kubectl >/dev/null; then
	echo "== installing kubectl"
	apt-get update && { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 kubectl || DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends -o DPkg::Lock::Timeout=300 kubernetes-client; }
fi
echo "== promtool: deploy/prometheus"
promtool check rules deploy/prometheus/recording.yml deploy/prometheus/alerts.yml
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/alerts_test.yml

# deploy/deploytest imports Helm and the Kubernetes API's types, the
# heaviest compile of the suite. It has no allocation budgets and no
# race-tagged files: vetted with -race and left out of the budgets' build,
# those packages compile once, in the -race variant its tests run with.
heavy='/deploy/deploytest$'
echo "== go vet"
go vet $(go list ./... | grep -v "$heavy")
go vet -race ./deploy/deploytest
# The allocation budgets (zero per event on the hot path) and an open
# stream's stack budget are built without -race, which instruments
# allocations and enlarges frames: run them on their own.
echo "== allocation budgets"
go test -count=1 -run 'Allocs$|Stack$' $(go list ./... | grep -v "$heavy")
# Tests that measure time run last, alone: beside the other packages'
# compiles and tests, two cores' worth of contention would be part of what
# they measure. They are the proof (bench/lab: how a slow first token's time
# splits) and the proxy's tests of time spent outside it.
measured='TestSlowClientIsTransport'
# The buffering corpus (proxy) runs every case three times here, on its own,
# with -race and without (a faster proxy and engine make other bursts); its
# ten-run confusion matrix in BENCHMARKS.md is `make corpus`.
corpus='TestBufferingCorpus'
echo "== go test -race"
go test -race -count=1 -timeout 10m -skip "^($measured|$corpus)\$" $(go list ./... | grep -v '/bench/lab$')
echo "== go test -race: tests that measure time, alone"
go test -race -count=1 -timeout 5m -run "^($measured)\$" ./proxy
# The proof measures how time splits, so it runs without -race, which
# slows the engine and proxy several times over and turns two cores'
# goroutine wake-ups into milliseconds no side can report; the lab's other
# tests (the end reasons) run with it.
go test -race -count=1 -timeout 5m -skip '^TestProofCauses$' ./bench/lab
go test -count=1 -timeout 5m -run '^TestProofCauses$' ./bench/lab
echo "== the buffering corpus, with -race and without"
go test -race -count=1 -timeout 10m -run "^$corpus\$" ./proxy -args -buffering.runs=3
go test -count=1 -timeout 5m -run "^$corpus\$" ./proxy -args -buffering.runs=3
