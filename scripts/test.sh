#!/usr/bin/env bash
# The whole test suite. The README gives this command and .ci/run calls it.
# It installs what the tests need when it is missing, so it passes on a
# fresh machine with only Go and the package registries. The unit tests
# alone, which need Go and nothing else, are `go test ./...`; the
# integration tests alone (files built with the integration tag: they start
# nginx, redis-server, chromium, prometheus, podman and kubectl) are
# scripts/integration.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

# The GOOS/GOARCH pairs the code is built for besides this machine's
# linux/amd64 (docs/testing.md): freebsd/386 is both a 32-bit int and an OS
# without the Linux socket I/O. The suite builds there the packages that
# have files of their own per platform (crossbuilt: the fallbacks of the
# socket I/O, the model's kernels), in seconds; the whole module there,
# about 90 s cold, is `make cross`, which the cold suite could no longer
# hold (982 s with it on 2026-12-05).
platforms='freebsd/386'
crossbuilt=$(grep -rl --include='*.go' '^//go:build' . | grep -v '_test\.go$' | xargs -n1 dirname | sort -u)

# phase NAME starts a phase; the next one (or the end) prints its wall time
# and the CPU time (user and system) of the commands it ran, which a busy
# machine does not inflate the way it does wall time: the kernel's tally of
# this shell's finished children (/proc's cutime and cstime, in 1/100 s).
cpu() {
	local st
	read -r -a st </proc/$$/stat
	echo $(((st[15] + st[16]) / 100))
}
phase_name= phase_start=$SECONDS phase_cpu=$(cpu)
phase() {
	if [ -n "$phase_name" ]; then
		echo "== $phase_name ($((SECONDS - phase_start)) s, $(($(cpu) - phase_cpu)) CPU-s)"
	fi
	phase_name=$1 phase_start=$SECONDS phase_cpu=$(cpu)
	if [ -n "$phase_name" ]; then
		echo "== $phase_name"
	fi
}

# The programs the integration tests start, each on its own port,
# configuration and directory, never as the Debian service; promtool checks
# the rules; podman builds the image FROM scratch (nothing is pulled and
# nothing is run); kubectl renders the kustomizations, offline.
phase "install what is missing"
./scripts/need.sh chromium kubectl nginx podman prometheus promtool redis-server

phase "promtool: deploy/prometheus"
promtool check rules deploy/prometheus/recording.yml deploy/prometheus/alerts.yml
promtool check config deploy/prometheus/prometheus.yml
promtool test rules deploy/prometheus/alerts_test.yml

# deploy/deploytest is a module of its own (go.work adds it; ./... at the
# root does not reach it). It imports Helm and the Kubernetes API's types,
# the heaviest compile of the suite, and its tests read manifests and drive
# outside programs: nothing of ours runs concurrently in it for the race
# detector to watch. It is built and run without -race, which kept those
# libraries' race build (about 100 s of a cold run) out of the suite.
deploytest=./deploy/deploytest/...

# What is built without -race is built as the image's binary is
# (deploy/docker/Dockerfile: CGO_ENABLED=0, -trimpath; scripts/image.sh),
# which deploytest's TestDockerfile runs as written: that build then finds
# every package it needs compiled by go vet. Built in the default
# configuration instead, the suite compiled the binary's 495 packages a
# second time for it: 213 CPU-seconds of a cold suite's 1,630 (2026-12-05,
# docs/testing.md). The budgets and the proof thus measure the code as the
# image builds it; the tests built with -race keep the default configuration.
phase "go vet"
./scripts/image.sh go vet -tags integration ./... $deploytest

phase "cross-builds: $platforms"
for p in $platforms; do
	GOOS=${p%/*} GOARCH=${p#*/} go build $crossbuilt
done

# The allocation budgets (zero per event on the hot path) and an open
# stream's stack budget are built without -race, which instruments
# allocations and enlarges frames: run them on their own, built only for
# the packages that have them (building every package's tests without
# -race cost the cold suite 50 s).
phase "allocation budgets, static checks"
budgets=$(grep -rl --include='*_test.go' -E 'func Test[A-Za-z0-9_]*(Allocs|Stack)\(' . | xargs -n1 dirname | sort -u)
./scripts/image.sh go test -count=1 -run 'Allocs$|Stack$' $budgets
# archtest reads and type-checks the code: -race finds nothing there and
# made it 15 times slower (77 s).
./scripts/image.sh go test -count=1 ./internal/archtest

# Tests that measure time run last, alone: beside the other packages'
# compiles and tests, two cores' worth of contention would be part of what
# they measure. They are the proof (bench/lab: how a slow first token's time
# splits) and the proxy's tests of time spent outside it.
measured='TestSlowClientIsTransport'
# The buffering corpus (proxy, an integration test: it starts nginx) runs
# every case three times here, on its own, with -race (without it, a faster
# proxy and engine make other bursts: `make corpus` runs that, ten times,
# for the confusion matrix in BENCHMARKS.md; the suite's 15 minutes left no
# room for it).
corpus='TestBufferingCorpus'
phase "unit tests, -race"
go test -race -count=1 -timeout 10m -skip "^($measured)\$" $(go list ./... | grep -v -e '/bench/lab$' -e '/internal/archtest$')
./scripts/image.sh go test -count=1 -timeout 10m $deploytest

phase "integration tests, -race"
./scripts/integration.sh -race -count=1 -skip "^($corpus)\$"

phase "tests that measure time, alone, -race"
go test -race -count=1 -timeout 5m -run "^($measured)\$" ./proxy
# The proof measures how time splits, so it runs without -race, which
# slows the engine and proxy several times over and turns two cores'
# goroutine wake-ups into milliseconds no side can report; the lab's other
# tests (the end reasons) run with it.
go test -race -count=1 -timeout 5m -skip '^TestProofCauses$' ./bench/lab
./scripts/image.sh go test -count=1 -timeout 5m -run '^TestProofCauses$' ./bench/lab

phase "the buffering corpus, -race"
go test -race -tags integration -count=1 -timeout 10m -run "^$corpus\$" ./proxy -args -buffering.runs=3

phase ""
echo "== all passed ($SECONDS s, $(cpu) CPU-s)"
