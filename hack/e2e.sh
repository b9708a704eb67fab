#!/usr/bin/env bash
# Runs the end-to-end packages in two lanes side by side. Each package brings
# up its own clusters on loopback ports of its own and spends most of its
# time waiting on them: the whole suite kept 2 cores 20 % busy two packages
# at a time.
#
# The export suite's outage tests stop and restart the machine's PostgreSQL;
# every other package that reads KOLLECT_TEST_POSTGRES_DSN needs it up. Each
# package runs under hack/postgres-lock.sh (go test -exec), which lets the
# export suite run only while no other test on the machine uses that server
# (the race step's too), whatever the timing. The lanes only order the
# packages so that little waits on that lock:
#
#   postgres  the packages that use PostgreSQL, two at a time: the export
#             suite first (it is the longest, and runs alone as far as
#             PostgreSQL goes), then the others side by side
#   others    the rest, two at a time
#
# Prints each package's result as it finishes, and a failing lane's whole
# output at the end. Usage: hack/e2e.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=$(go list ./test/e2e/...)
stops=() uses=() others=()
for pkg in ${pkgs}; do
	dir=./${pkg#kollect.dev/kollect/}
	compgen -G "${dir}/*_test.go" >/dev/null || continue
	case "$(hack/postgres-lock.sh --mode "${dir}")" in
	exclusive) stops+=("${dir}") ;;
	shared) uses+=("${dir}") ;;
	*) others+=("${dir}") ;;
	esac
done

# One server binary for every package: built here when make has not, so
# that the packages do not each build it into the same file at once.
if [[ -z "${KOLLECT_BINARY:-}" ]]; then
	echo "e2e: building kollect-apiserver..."
	go build -o _output/bin/kollect-apiserver ./cmd/kollect-apiserver
	export KOLLECT_BINARY="${PWD}/_output/bin/kollect-apiserver"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/kollect-e2e.XXXXXX")
declare -A pids=()
sentinel=""
# Interrupted (Ctrl-C, a CI timeout), the script stops what it started:
# each lane runs in a process group of its own (setsid), its test binaries
# and their clusters with it.
# shellcheck disable=SC2317 # run by the trap
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill -TERM -- "-${pid}" 2>/dev/null || true
	done
	[[ -z "${sentinel}" ]] || kill "${sentinel}" 2>/dev/null || true
	rm -rf "${logs}"
}
trap cleanup EXIT

# lane NAME N PKGS...: one go test running N packages at a time, in the
# background, its output in the lane's log.
lane() {
	local name=$1 n=$2
	shift 2
	(($#)) || return 0 # no package: go test alone would test the root
	echo "e2e lane ${name} (${n} at a time): $*"
	: >"${logs}/${name}.log"
	setsid go test -count=1 -p "${n}" -exec "${PWD}/hack/postgres-lock.sh" "${flags[@]}" "$@" >"${logs}/${name}.log" 2>&1 &
	pids[${name}]=$!
}
flags=("$@")
lane postgres 2 "${stops[@]}" "${uses[@]}"
lane others 2 "${others[@]}"

# Results as the packages finish, from both lanes, until the lanes end
# (tail follows the sentinel: it stops a second after the sentinel does).
sleep infinity &
sentinel=$!
tail -n +1 -F --pid="${sentinel}" "${logs}/postgres.log" "${logs}/others.log" 2>/dev/null |
	grep --line-buffered -E '^(ok|FAIL|---)[[:space:]]' &
watcher=$!

status=0 failed=()
for name in "${!pids[@]}"; do
	if ! wait "${pids[${name}]}"; then
		status=1
		failed+=("${name}")
	fi
done
# The watcher only prints: its end, however it came, decides nothing.
kill "${sentinel}" 2>/dev/null || true
sentinel=""
wait "${watcher}" || true
pids=()

for name in "${failed[@]}"; do
	echo
	echo "e2e lane ${name} FAILED; its output:"
	cat "${logs}/${name}.log"
done
exit ${status}
