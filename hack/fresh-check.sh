#!/usr/bin/env bash
# Proves the two commands work on a fresh machine: clones the repository's
# HEAD into a temporary directory and, with EMPTY Go module and build caches
# and no pinned tools, times
#
#   1. `make run` until the local cluster is ready (then stops it), and
#   2. `make test`, the whole suite.
#
# Each step gets its own clone and its own empty caches, so neither warms
# the other. Prints both times at the end; exits non-zero if either fails.
# Usage: hack/fresh-check.sh [run|test]...   (default: run test)
# KEEP=1 keeps the scratch directory (logs, caches) for a look afterwards.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps=("$@")
((${#steps[@]})) || steps=(run test)
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/kollect-fresh.XXXXXX")"
cleanup() {
	if [[ "${KEEP:-0}" == 1 ]]; then
		echo "fresh-check: kept ${SCRATCH}"
		return
	fi
	chmod -R u+w "${SCRATCH}" 2>/dev/null || true # the module cache is read-only
	rm -rf "${SCRATCH}"
}
trap cleanup EXIT

log() { echo "fresh-check: $*"; }
# Every step checks the commit HEAD was at the start, even if HEAD moves
# while the steps run, and the results name that commit.
COMMIT=$(git -C "${ROOT}" rev-parse HEAD)
if [[ -n "$(git -C "${ROOT}" status --porcelain --untracked-files=no)" ]]; then
	log "note: uncommitted changes are not checked; this checks HEAD ${COMMIT:0:7}"
fi

# fresh NAME: a new clone and empty caches for one step; prints the clone's path.
fresh() {
	local dir="${SCRATCH}/$1"
	mkdir -p "${dir}/gomodcache" "${dir}/gocache"
	git clone --quiet --no-hardlinks "${ROOT}" "${dir}/src"
	git -C "${dir}/src" checkout --quiet --detach "${COMMIT}"
	echo "${dir}"
}

# run_in DIR CMD...: runs CMD in DIR's clone with DIR's empty caches and nothing
# of this shell's Kollect settings.
run_in() {
	local dir=$1
	shift
	(cd "${dir}/src" && env -u KOLLECT_BINARY -u KOLLECT_TOOLS_BIN -u GOFLAGS \
		GOMODCACHE="${dir}/gomodcache" GOCACHE="${dir}/gocache" "$@")
}

# descendants PID: every process below PID.
descendants() {
	local p
	for p in $(pgrep -P "$1"); do
		echo "${p}"
		descendants "${p}"
	done
}

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
declare -A took
status=0

for step in "${steps[@]}"; do
	case "${step}" in
	run)
		dir="$(fresh run)"
		log "cold make run in ${dir}/src (log: ${dir}/run.log)..."
		start=$(date +%s)
		run_in "${dir}" make run >"${dir}/run.log" 2>&1 &
		pid=$!
		# Ready when kollect-local says so; give up after 30 minutes.
		ready=0
		while kill -0 "${pid}" 2>/dev/null && (($(date +%s) - start < 1800)); do
			if grep -q '^ready in ' "${dir}/run.log"; then
				ready=1
				break
			fi
			sleep 2
		done
		took[run]=$(($(date +%s) - start))
		# Ctrl-C, as a person would, to this run's kollect-local (not to any
		# other on the machine); it stops what it started.
		for p in $(descendants "${pid}"); do
			[[ "$(ps -o comm= -p "${p}" 2>/dev/null)" != kollect-local ]] || kill -INT "${p}" 2>/dev/null || true
		done
		# Not ready (say, still building): stop the whole run, bounded.
		for _ in $(seq 1 60); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 1
		done
		if kill -0 "${pid}" 2>/dev/null; then
			kill -TERM $(descendants "${pid}") "${pid}" 2>/dev/null || true
		fi
		wait "${pid}" || true
		if ((ready)); then
			log "make run was ready after $(fmt_time "${took[run]}")"
		else
			log "make run did NOT become ready; last lines of its log:"
			tail -30 "${dir}/run.log" >&2
			status=1
		fi
		;;
	test)
		dir="$(fresh test)"
		log "cold make test in ${dir}/src (log: ${dir}/test.log)..."
		start=$(date +%s)
		if run_in "${dir}" make test 2>&1 | tee "${dir}/test.log" | sed -u 's/^/  | /'; then
			took[test]=$(($(date +%s) - start))
			log "make test passed in $(fmt_time "${took[test]}")"
		else
			took[test]=$(($(date +%s) - start))
			log "make test FAILED after $(fmt_time "${took[test]}")"
			status=1
		fi
		;;
	*)
		echo "usage: hack/fresh-check.sh [run|test]..." >&2
		exit 2
		;;
	esac
done

echo
log "results on $(nproc) cores, $(go env GOVERSION), commit ${COMMIT:0:7}, empty GOMODCACHE and GOCACHE:"
for step in "${steps[@]}"; do
	printf 'fresh-check:   cold make %-5s %s\n' "${step}" "$(fmt_time "${took[${step}]:-0}")"
done
exit ${status}
