# Maintainer targets. `make` alone lists them (make help); `make test` is
# the whole suite, exactly as CI runs it; `make test-unit` needs Go alone,
# `make test-integration` installs the programs its tests start. A target's
# `## ` comment is its line in the list.

.DEFAULT_GOAL := help
.PHONY: help build

help: ## list the targets (what `make` alone does)
	@echo 'usage: make [TARGET] [VARIABLE=value ...]'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[A-Za-z0-9_-]+:.*## / { printf "  %-17s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# What build stamps into the binary: `ttftlens version` prints them.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)

build: ## build bin/ttftlens, its version and commit stamped from git
	go build -ldflags '-X main.stampedVersion=$(VERSION) -X main.stampedRevision=$(REVISION)' -o bin/ttftlens ./cmd/ttftlens

# Pinned tool versions, run with `go run` (nothing to install).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0

# The packages whose benchmarks BENCHMARKS.md reports.
BENCH_PKGS := ./proxy ./internal/sock ./proxy/engines ./sse ./gateway ./exporters ./refengine ./refengine/model ./bench ./spanjoin
BENCHFLAGS ?=

# How long each fuzz target runs (a duration, or Nx for N inputs).
FUZZTIME ?= 10s

.PHONY: test test-unit test-integration cross bench corpus lint fuzz scale routing

test: ## the whole suite, exactly as CI runs it (scripts/test.sh)
	./scripts/test.sh

test-unit: ## the unit tests: go test ./..., Go and nothing else
	go test ./...

test-integration: ## the tests that start outside programs (installs them)
	./scripts/integration.sh

# The whole module for the platforms besides linux/amd64 (docs/testing.md):
# the suite builds only the packages with files of their own per platform.
CROSS ?= freebsd/386 darwin/arm64

cross: ## the whole module built for CROSS (freebsd/386 darwin/arm64)
	@set -e; for p in $(CROSS); do echo "== $$p"; GOOS=$${p%/*} GOARCH=$${p#*/} go build ./...; done

bench: ## the benchmarks BENCHMARKS.md reports (BENCHFLAGS=...)
	go test -run '^$$' -bench . -benchmem $(BENCHFLAGS) $(BENCH_PKGS)

# The buffering corpus's confusion matrix (BENCHMARKS.md): every case ten
# times, with -race and without.
corpus: ## the buffering corpus's confusion matrix, with -race and without
	./scripts/need.sh nginx
	go test -race -tags integration -count=1 -timeout 30m -v -run '^TestBufferingCorpus$$' ./proxy
	go test -tags integration -count=1 -timeout 15m -v -run '^TestBufferingCorpus$$' ./proxy

# Cost at scale against nginx (BENCHMARKS.md): ttftlens and nginx side by
# side on a zero-compute SSE upstream, pinned to their own CPUs, and the
# knee (new streams per second at added TTFT p99 ≤ 10 ms). It prints a
# Markdown table. SCALEFLAGS='-quick' checks that the suite works (a tenth
# of every size); -workloads and the sizes pick what runs; -ttftlens-base
# BIN adds a second ttftlens binary, a change's before
# (go run ./bench/scale -h).
SCALEFLAGS ?=

scale: ## cost at scale: ttftlens and nginx side by side (SCALEFLAGS=-quick)
	./scripts/need.sh nginx perf
	go run ./bench/scale $(SCALEFLAGS)

# Routing for the first token (BENCHMARKS.md): three reference engines in
# this process, one with a prefill twice as slow, behind ttftlens as one
# pool; each pool policy in turn on the same workload (eight shared system
# prompts, many users) at a calibrated rate, for three seeds (about half an
# hour), then the targets seed by seed. Go alone; prints Markdown.
# ROUTINGFLAGS='-quick' checks that it works (go run ./bench/routing -h).
ROUTINGFLAGS ?=

routing: ## the routing benchmark: pool policies side by side (ROUTINGFLAGS=-quick)
	go run ./bench/routing $(ROUTINGFLAGS)

# govulncheck reads the Go vulnerability database (https://vuln.go.dev, or
# GOVULNDB=file:///path for a local copy).
lint: ## go vet, staticcheck and govulncheck
	go vet ./...
	go run $(STATICCHECK) ./...
	go run $(GOVULNCHECK) $(if $(GOVULNDB),-db $(GOVULNDB)) ./...

# Every `func FuzzX` in a _test.go file, one after the other, each alone
# in its package for FUZZTIME.
fuzz: ## every fuzz target, each for FUZZTIME (default 10s)
	@set -e; grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sort | \
	while IFS=: read -r file decl; do \
		name=$${decl#func }; pkg=$$(dirname "$$file"); \
		echo "== $$name ($$pkg)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done
