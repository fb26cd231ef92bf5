#!/usr/bin/env bash
# scripts/image.sh COMMAND...: runs COMMAND (a go command) in the image's
# build configuration, deploy/docker/Dockerfile's `CGO_ENABLED=0 go build
# -trimpath` (keep the two alike), so that what it compiles is what that
# build compiles. scripts/test.sh builds everything it builds without -race
# this way, and deploy/deploytest's TestDockerfile, which runs the
# Dockerfile's build as written, then finds the binary's packages compiled.
set -euo pipefail
CGO_ENABLED=0 GOFLAGS="-trimpath $(go env GOFLAGS)" exec "$@"
