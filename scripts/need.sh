#!/usr/bin/env bash
# scripts/need.sh PROGRAM...: installs Debian's package for each program
# that is not on PATH (the integration tests' and `make scale`'s outside
# programs). Each runs only where a test or benchmark starts it: on its own
# port, configuration and directory, never as the Debian service.
set -euo pipefail

# The Debian package that provides a program.
package() {
	case "$1" in
	promtool) echo prometheus ;;
	perf) echo linux-perf ;;
	*) echo "$1" ;;
	esac
}

apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=300 "$@"
}

updated=
for prog in "$@"; do
	command -v "$prog" >/dev/null && continue
	pkg=$(package "$prog")
	echo "== installing $pkg (for $prog)"
	if [ -z "$updated" ]; then
		apt-get update
		updated=1
	fi
	case "$prog" in
	# The machine image has kubectl; elsewhere take the packaged one
	# (Debian's kubernetes-client is older: its kustomize may refuse
	# newer fields).
	kubectl) apt_install kubectl || apt_install kubernetes-client ;;
	# With its recommended packages (fonts: the page's screenshot).
	chromium) DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=300 chromium ;;
	*) apt_install "$pkg" ;;
	esac
done
