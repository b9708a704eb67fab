#!/usr/bin/env bash
# Runs the controller packages' unit tests under the race detector: every
# package `go list $RACE_PKGS` names (default ./pkg/controllers/...; make
# unit leaves them to this step). The race detector needs cgo, so this is
# the one step built with CGO_ENABLED=1 (make check-cc checks the C compiler
# first); with cgo on, the net package would resolve names through the C
# library, so GODEBUG=netdns=go keeps the pure-Go resolver the shipped
# static binary uses.
#
# The packages whose tests use the machine's PostgreSQL run last, each under
# its lock (hack/postgres-lock.sh): never while the export end-to-end suite
# has that server stopped. Waiting for the lock counts against go test's
# kill timer, hence the long -timeout.
#
# Usage: hack/race.sh [go test flags...]
#        hack/race.sh --compile-only   builds (and vets) the race-instrumented
#        packages and test binaries and runs none: make test does this early,
#        at low priority, in the cycles other steps leave idle
set -euo pipefail
cd "$(dirname "$0")/.."

read -ra patterns <<<"${RACE_PKGS:-./pkg/controllers/...}"
module=$(go list -m)
plain=() postgres=()
for pkg in $(go list "${patterns[@]}"); do
	dir=./${pkg#"${module}"/}
	if [[ "$(hack/postgres-lock.sh --mode "${dir}")" == none ]]; then
		plain+=("${dir}")
	else
		postgres+=("${dir}")
	fi
done
((${#plain[@]} + ${#postgres[@]})) || { echo "race: go list ${patterns[*]} names no package" >&2; exit 1; }

export CGO_ENABLED=1 GODEBUG="${GODEBUG:+${GODEBUG},}netdns=go"
if [[ "${1:-}" == --compile-only ]]; then
	echo "race: compiling ${patterns[*]} with -race: $((${#plain[@]} + ${#postgres[@]})) packages"
	# The same go test as below, its test binaries run by true: compiled,
	# vetted and linked, nothing run.
	exec go test -race -count=1 -run='^$' -exec true "${plain[@]}" "${postgres[@]}" >/dev/null
fi
echo "race: go test -race over ${patterns[*]}: $((${#plain[@]} + ${#postgres[@]})) packages; with PostgreSQL, last: ${postgres[*]:-none}"
exec go test -race -count=1 -timeout 30m -exec "${PWD}/hack/postgres-lock.sh" "$@" "${plain[@]}" "${postgres[@]}"
