#!/usr/bin/env bash
# A/B: the same benchmarks at two commits, in one run, compared by benchstat.
#
#   scripts/ab.sh BASE [HEAD] [-- PKG:REGEX ...]
#
# Builds each package's test binary at BASE (in a temporary worktree) and at
# HEAD (default: the work tree as it is), then runs the two alternately,
# COUNT times each (default 6), so drift in the machine's load falls on both
# sides alike. Without PKG:REGEX it runs the benchmarks BENCHMARKS.md's
# headline rows come from. Output: benchstat's table, one column per side.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:?usage: scripts/ab.sh BASE [HEAD] [-- PKG:REGEX ...]}
shift
head=
if [ $# -gt 0 ] && [ "$1" != "--" ]; then head=$1; shift; fi
[ "${1:-}" = "--" ] && shift
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
	specs=(
		'./proxy:^Benchmark(AddedLatency|Relay)$'
		'./sse:^BenchmarkScanner'
		'./proxy/engines:.'
		'./exporters:.'
		'./gateway:.'
	)
fi
count=${COUNT:-6}
benchtime=${BENCHTIME:-}
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/base" "$base"
if [ -n "$head" ]; then
	git worktree add -q --detach "$work/head" "$head"
	headdir=$work/head
else
	headdir=$PWD
fi

# A package may have moved between the two commits: a spec's package is
# looked up at each side, and a side that lacks it is reported, not guessed.
build() { # dir pkg out
	if (cd "$1" && go list "$2" >/dev/null 2>&1); then
		(cd "$1" && go test -c -o "$3" "$2")
	else
		echo "ab: $2 does not exist at $1" >&2
		return 1
	fi
}
i=0
for spec in "${specs[@]}"; do
	pkg=${spec%%:*}
	echo "== building $pkg at both sides" >&2
	build "$work/base" "$pkg" "$work/a$i.test"
	build "$headdir" "$pkg" "$work/b$i.test"
	i=$((i + 1))
done

for round in $(seq "$count"); do
	echo "== round $round of $count" >&2
	i=0
	for spec in "${specs[@]}"; do
		pkg=${spec%%:*} re=${spec#*:}
		for side in a b; do
			dir=$([ $side = a ] && echo "$work/base" || echo "$headdir")
			(cd "$dir/$pkg" && "$work/$side$i.test" -test.run '^$' -test.bench "$re" \
				-test.benchmem -test.count 1 ${benchtime:+-test.benchtime "$benchtime"}) |
				grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >>"$work/$side.txt"
		done
		i=$((i + 1))
	done
done
cp "$work/a.txt" "${AB_OUT:-/tmp}/ab-base.txt"
cp "$work/b.txt" "${AB_OUT:-/tmp}/ab-head.txt"
go run "$benchstat" base="$work/a.txt" head="$work/b.txt"
