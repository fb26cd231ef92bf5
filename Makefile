# Maintainer targets. `make test` is the whole suite, exactly as CI runs it;
# `make test-unit` needs Go alone, `make test-integration` installs the
# programs its tests start.

# Pinned tool versions, run with `go run` (nothing to install).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0

# The packages whose benchmarks BENCHMARKS.md reports.
BENCH_PKGS := ./proxy ./proxy/engines ./sse ./gateway ./exporters ./refengine ./refengine/model ./bench
BENCHFLAGS ?=

# How long each fuzz target runs (a duration, or Nx for N inputs).
FUZZTIME ?= 10s

.PHONY: test test-unit test-integration bench corpus lint fuzz scale

test:
	./scripts/test.sh

test-unit:
	go test ./...

test-integration:
	./scripts/integration.sh

bench:
	go test -run '^$$' -bench . -benchmem $(BENCHFLAGS) $(BENCH_PKGS)

# The buffering corpus's confusion matrix (BENCHMARKS.md): every case ten
# times, with -race and without.
corpus:
	./scripts/need.sh nginx
	go test -race -tags integration -count=1 -timeout 30m -v -run '^TestBufferingCorpus$$' ./proxy
	go test -tags integration -count=1 -timeout 15m -v -run '^TestBufferingCorpus$$' ./proxy

# Cost at scale against nginx (BENCHMARKS.md): ttftlens and nginx side by
# side on a zero-compute SSE upstream, pinned to their own CPUs. It prints a
# Markdown table. SCALEFLAGS='-quick' checks that the suite works (a tenth
# of every size); -workloads and the sizes pick what runs
# (go run ./bench/scale -h).
SCALEFLAGS ?=

scale:
	./scripts/need.sh nginx perf
	go run ./bench/scale $(SCALEFLAGS)

# govulncheck reads the Go vulnerability database (https://vuln.go.dev, or
# GOVULNDB=file:///path for a local copy).
lint:
	go vet ./...
	go run $(STATICCHECK) ./...
	go run $(GOVULNCHECK) $(if $(GOVULNDB),-db $(GOVULNDB)) ./...

# Every `func FuzzX` in a _test.go file, one after the other, each alone
# in its package for FUZZTIME.
fuzz:
	@set -e; grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sort | \
	while IFS=: read -r file decl; do \
		name=$${decl#func }; pkg=$$(dirname "$$file"); \
		echo "== $$name ($$pkg)"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done
