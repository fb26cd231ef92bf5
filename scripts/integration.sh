#!/usr/bin/env bash
# scripts/integration.sh [go test flags]: the integration tests alone, the
# tests in files built with the integration tag (they start nginx,
# redis-server, chromium, prometheus, podman or kubectl, installed here when
# missing). The flags go to go test (scripts/test.sh passes -race and what
# it runs apart; deploy/deploytest runs without -race). The unit tests are
# `go test ./...`.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/need.sh chromium kubectl nginx podman prometheus redis-server

# The tests of every file built with the integration tag, and their packages
# (deploy/deploytest is a module of its own: go.work lets one go test run it
# with the root's packages).
files=$(grep -rl --include='*_test.go' '^//go:build integration' .)
tests=$(sed -nE 's/^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\).*/\1/p' $files | sort -u | paste -sd'|')
pkgs=$(for f in $files; do dirname "$f"; done | sort -u)
go test -tags integration -timeout 10m "$@" -run "^($tests)\$" $(echo "$pkgs" | grep -v '^\./deploy/')
# deploy/deploytest never with -race, and built as the image's binary is
# (scripts/test.sh says why).
flags=()
for a in "$@"; do
	[ "$a" = -race ] || flags+=("$a")
done
./scripts/image.sh go test -tags integration -timeout 10m "${flags[@]}" -run "^($tests)\$" $(echo "$pkgs" | grep '^\./deploy/')
