#!/usr/bin/env bash
# Downloads the modules a Go module needs to build into the module cache,
# printing progress as they arrive, so a cold cache shows activity and an
# unreachable proxy names itself instead of surfacing later as a build error.
# Plain `go mod download` (not `all`) leaves go.sum as committed.
# Usage: hack/download-modules.sh [MODULE_DIR...]   (default: the repository's root module)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dirs=("$@")
((${#dirs[@]})) || dirs=("${ROOT}")
for dir in "${dirs[@]}"; do
	name="${dir#"${ROOT}"}"
	name="${name#/}"
	echo "modules: downloading what ${name:-the root module} needs (cached after the first time)..."
	# -x traces each fetch as it happens ("# get URL.zip: 200 OK"); count
	# the module zips, pass everything that is not a trace through.
	if ! (cd "${dir}" && GOWORK=off GOFLAGS=-mod=readonly go mod download -x 2>&1) | {
		n=0
		while IFS= read -r line; do
			case "${line}" in
			'# get '*'.zip: 200 OK'*)
				n=$((n + 1))
				((n % 50)) || echo "modules:   ${n} downloaded"
				;;
			'# '* | 'mkdir '* | 'cd '* | 'unzip '* | 'rm '* | 'mv '*) ;;
			*) echo "modules: ${line}" >&2 ;;
			esac
		done
		((n == 0)) || echo "modules:   ${n} downloaded, all there"
	}; then
		echo "modules: go mod download in ${dir} failed (see above): is the Go module proxy reachable? (GOPROXY=$(go env GOPROXY))" >&2
		exit 1
	fi
done
