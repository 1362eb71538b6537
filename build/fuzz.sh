#!/usr/bin/env bash
# fuzz.sh: runs every fuzz target of the module (func FuzzXxx in any package) for a short time,
# one target per `go test -fuzz` run as Go requires, and stops at the first failure, naming the
# target. The seed corpora (testdata/fuzz/) already run as ordinary tests in `go test`; this
# searches beyond them.
#
#   FUZZTIME          time per target (default 10s); any -fuzztime value: 30s, 5000x
#   FUZZMINIMIZETIME  time to minimize an input (default 200x): the default 60s would let the
#                     minimizing of each new input of a large seed eat the whole run
#   GO                the go command (default go)
#
# A failing input is written to the package's testdata/fuzz/FuzzXxx/; rerun it with
# `go test -run 'FuzzXxx/NAME' ./PKG`.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-200x}

# `go test -list` prints each package's matching names, then "ok  PKG ...".
targets=$("$GO" test -list '^Fuzz' ./... | awk '
	/^Fuzz/ { names[n++] = $1; next }
	/^ok/   { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }')
if [ -z "$targets" ]; then
	echo "fuzz.sh: no fuzz targets found" >&2
	exit 1
fi

# Go's fuzz coordinator up to 1.26 can fail a run that found nothing, with "context deadline
# exceeded" as the fuzz time ends (go.dev/issue/75804): such a failure, when it wrote no input to
# testdata/fuzz, is reported as that race and the target run once more; a second one fails.
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
start=$SECONDS
count=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
while read -r pkg target; do
	corpus="$("$GO" list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
	for try in 1 2; do
		echo "== $target ($pkg), $FUZZTIME"
		before=$(inputs "$corpus")
		if "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" \
			-fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg" 2>&1 | tee "$out"; then
			break
		fi
		if [ "$try" = 1 ] && grep -q '^    context deadline exceeded$' "$out" &&
			[ "$(inputs "$corpus")" = "$before" ]; then
			echo "fuzz.sh: $target: the fuzz coordinator's deadline race (go.dev/issue/75804), no input written; once more" >&2
			continue
		fi
		echo "fuzz.sh: FAIL: $target in $pkg (the input is under its testdata/fuzz/$target/)" >&2
		exit 1
	done
	count=$((count + 1))
done <<<"$targets"
echo "fuzz.sh: $count targets passed in $((SECONDS - start))s"
