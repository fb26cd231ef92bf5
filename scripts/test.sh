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

echo "== go vet"
go vet ./...
echo "== go test -race"
go test -race -count=1 -timeout 12m ./...
