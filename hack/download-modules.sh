#!/usr/bin/env bash
# Downloads every module a Go module needs into the module cache, printing
# progress, so a cold cache shows activity and an unreachable proxy names
# itself instead of surfacing later as a build error.
# Usage: hack/download-modules.sh [MODULE_DIR...]   (default: the repository's root module)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dirs=("$@")
((${#dirs[@]})) || dirs=("${ROOT}")
for dir in "${dirs[@]}"; do
	name="${dir#"${ROOT}"}"
	name="${name#/}"
	echo "modules: downloading what ${name:-the root module} needs (cached after the first time)..."
	n=0
	# -json reports one object per module; count them as they arrive.
	(cd "${dir}" && GOWORK=off GOFLAGS=-mod=readonly go mod download -json all) | while IFS= read -r line; do
		case "${line}" in
		$'\t"Path": '*)
			n=$((n + 1))
			((n % 100)) || echo "modules:   ${n} ready"
			;;
		$'\t"Error": '*) echo "modules: ${line#*: }" >&2 ;;
		esac
	done
	if [[ "${PIPESTATUS[0]}" != 0 ]]; then
		echo "modules: go mod download in ${dir} failed: is the Go module proxy reachable? (GOPROXY=$(go env GOPROXY))" >&2
		exit 1
	fi
done
