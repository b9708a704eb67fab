#!/usr/bin/env bash
# make test: the whole suite (.ci/run calls exactly `make test`), scheduled
# for a 2-core machine. The steps are make targets (or hack/ scripts); this
# script orders them, runs some side by side, tags every line of output
# with its step, keeps each step's output in _output/test/STEP.log and ends
# with a table of when each step started and what it took.
#
#   preflight      Go 1.26, a C compiler (race step), flock, PostgreSQL and
#                  NATS up: seconds, so a missing piece is named first
#   modules        the Go modules the build needs (downloaded once)
#   verify         generated code and manifests current, gofmt, go vet
#   build          kollect-apiserver, kollect-local and the pinned tools
#   unit           unit and registry tests, but for the controller packages
#   e2e            the end-to-end suite in two lanes (hack/e2e.sh)
#   fuzz           every fuzz target for FUZZTIME
#   release-check  the image built and run, the alert rules under promtool
#   race           the controller packages under go test -race (cgo on)
#   fuzz-build     compiles what fuzz needs, runs nothing
#   race-build     compiles what race needs, runs nothing
#
# When:
#   - preflight, modules, verify, build, unit and e2e run one after another:
#     each needs what the one before checked or built.
#   - fuzz-build then race-build start after modules at nice 19: the fuzz-
#     and race-instrumented copies of the Kubernetes libraries are minutes
#     of CPU, done in the cycles the steps in front leave idle (downloads,
#     links, tests waiting on their servers).
#   - fuzz, release-check and race run one after another at nice 10 beside
#     the e2e lanes, which mostly wait on their clusters: each once e2e has
#     started, the one before has ended and its build step is done. race
#     comes last: its PostgreSQL tests would wait for the export suite.
# The tests that use the machine's PostgreSQL take turns with the export
# suite, which stops that server, through a lock (hack/postgres-lock.sh),
# whatever the timing.
#
# A failure before e2e stops make test (what follows builds on it); e2e,
# fuzz, release-check and race each run to their end, and every failure is
# reported with the failing step's whole output at the end. A build step's
# failure is not make test's: the step after it compiles for itself and
# reports the error. Ctrl-C (or SIGTERM) stops every step: each runs in a
# session of its own, which this script signals.
set -euo pipefail
cd "$(dirname "$0")/.."

logs=_output/test
rm -rf "${logs}"
mkdir -p "${logs}"

declare -A pid=() tagger=() started=() took=() result=() seen=() size=()
order=() failed=()
t0=${SECONDS}
mk=(make --no-print-directory)

fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
note() { echo "make test: [$(fmt $((SECONDS - t0)))] $*"; }

# launch NAME NICE CMD...: starts step NAME in the background, in a session
# of its own at nice NICE (with the kernel's autogroups on, a session is
# scheduled as one group, so the group's nice is set too), its output tagged
# on the terminal and kept in _output/test/NAME.log.
launch() {
	local name=$1 niceness=$2 fd
	shift 2
	order+=("${name}")
	started[${name}]=${SECONDS}
	seen[${name}]=${SECONDS}
	note "${name}: started$( ((niceness == 0)) || echo " at nice ${niceness}")"
	exec {fd}> >(tee "${logs}/${name}.log" | sed -u "s/^/$(printf '%-13s' "${name}") | /")
	tagger[${name}]=$!
	# The CPU time the step's processes used goes to NAME.cpu (bash's times).
	# shellcheck disable=SC2016 # expanded by the inner bash
	setsid bash -c 'if (($1 > 0)); then echo "$1" >/proc/self/autogroup 2>/dev/null || true; fi
		n=$1 cpu=$2; shift 2; rc=0; nice -n "${n}" "$@" || rc=$?; times >"${cpu}"; exit "${rc}"' \
		_ "${niceness}" "${logs}/${name}.cpu" "$@" </dev/null >&"${fd}" 2>&1 &
	pid[${name}]=$!
	exec {fd}>&-
}

# drain PID: waits for a step's tagger to print what the step wrote; gives
# up after 5 s (a server the step started may hold the pipe open).
drain() {
	local i
	for ((i = 0; i < 50; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	kill "$1" 2>/dev/null || true
}

# check NAME: notes the end of step NAME (its time and result) once it has
# ended; while it runs, says so when it has printed nothing for a minute.
check() {
	local name=$1 rc=0 now
	[[ -n "${pid[${name}]:-}" && -z "${result[${name}]:-}" ]] || return 0
	if kill -0 "${pid[${name}]}" 2>/dev/null; then
		now=$(stat -c %s "${logs}/${name}.log" 2>/dev/null || echo 0)
		if [[ "${now}" != "${size[${name}]:-}" ]]; then
			size[${name}]=${now}
			seen[${name}]=${SECONDS}
		elif ((SECONDS - seen[${name}] >= 60)); then
			seen[${name}]=${SECONDS}
			note "${name}: running for $(fmt $((SECONDS - started[${name}])))"
		fi
		return 0
	fi
	wait "${pid[${name}]}" || rc=$?
	took[${name}]=$((SECONDS - started[${name}]))
	drain "${tagger[${name}]}"
	if ((rc == 0)); then
		result[${name}]=passed
	elif [[ "${name}" == *-build ]]; then
		result[${name}]="failed (exit ${rc}); ${name%-build} compiles for itself"
	else
		result[${name}]="FAILED (exit ${rc})"
		failed+=("${name}")
	fi
	note "${name}: ${result[${name}]} in $(fmt "${took[${name}]}")"
}

launched() { [[ -n "${pid[$1]:-}" ]]; }
ended() { [[ -n "${result[$1]:-}" ]]; }
# idle NAME...: none of them runs (each ended or never started).
idle() {
	local name
	for name; do
		! launched "${name}" || ended "${name}" || return 1
	done
}

e2e_started=0
declare -A needs=([fuzz]=fuzz-build [race]=race-build)
# tick: notes ended steps, and starts the background steps whose turn it is.
tick() {
	local name
	for name in "${order[@]}"; do check "${name}"; done
	if ended modules && ! launched fuzz-build; then
		launch fuzz-build 19 hack/fuzz.sh --compile-only
	fi
	if launched fuzz-build && ended fuzz-build && ! launched race-build; then
		launch race-build 19 hack/race.sh --compile-only
	fi
	((e2e_started)) || return 0
	# Beside e2e, one after another, each once what it needs has ended.
	local prev="" next
	for next in fuzz release-check race; do
		if ! launched "${next}"; then
			if { [[ -z "${prev}" ]] || ended "${prev}"; } && { [[ -z "${needs[${next}]:-}" ]] || ended "${needs[${next}]}"; }; then
				launch "${next}" 10 "${mk[@]}" "${next}"
			fi
			break
		fi
		prev=${next}
	done
	return 0
}

# stop_all: stops every step still running (its whole session), waiting up
# to 30 s for them to clean up (e2e.sh stops its lanes and their clusters).
stop_all() {
	local name i live
	for name in "${order[@]}"; do
		ended "${name}" || kill -TERM -- "-${pid[${name}]}" 2>/dev/null || true
	done
	for ((i = 0; i < 30; i++)); do
		live=0
		for name in "${order[@]}"; do
			ended "${name}" || ! kill -0 "${pid[${name}]}" 2>/dev/null || live=1
		done
		((live)) || break
		sleep 1
	done
	for name in "${order[@]}"; do
		ended "${name}" || kill -KILL -- "-${pid[${name}]}" 2>/dev/null || true
	done
}

# cpu NAME: the CPU time (user and system, in seconds) step NAME's
# processes used, from the second line of bash's times.
cpu() {
	[[ -s "${logs}/$1.cpu" ]] || { echo "-"; return; }
	sed -n 2p "${logs}/$1.cpu" | awk '{
		t = 0
		for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] }
		printf "%dm%02ds", t / 60, t % 60 }'
}

summary() { # HEADLINE
	local name
	echo
	note "$1 ($(nproc) cores, $(go env GOVERSION))"
	printf '  %-13s %8s %8s %8s  %s\n' step start took cpu result
	for name in "${order[@]}"; do
		printf '  %-13s %8s %8s %8s  %s\n' "${name}" "$(fmt $((started[${name}] - t0)))" \
			"$(fmt "${took[${name}]:-$((SECONDS - started[${name}]))}")" "$(cpu "${name}")" "${result[${name}]:-stopped}"
	done
	printf '  %-13s %8s %8s\n' total "" "$(fmt $((SECONDS - t0)))"
	echo "  (start: from the start of make test; cpu: user and system time of the step's processes)"
}

# report: each failed step's whole output, then the table; exits 1 on a
# failure.
report() {
	local name
	for name in "${failed[@]}"; do
		echo
		echo "========== ${name} FAILED; its output (also in ${logs}/${name}.log):"
		cat "${logs}/${name}.log"
	done
	if ((${#failed[@]})); then
		summary "FAILED: ${failed[*]}"
		exit 1
	fi
	summary "every step passed"
	note "all suites passed"
}

interrupted() {
	trap - INT TERM
	echo
	note "interrupted: stopping every step"
	stop_all
	summary "interrupted"
	exit 130
}
trap interrupted INT TERM
trap stop_all EXIT

# serial NAME TARGET...: step NAME (make TARGET...) in front; its failure
# stops make test.
serial() {
	local name=$1
	shift
	launch "${name}" 0 "${mk[@]}" "$@"
	while tick && ! ended "${name}"; do sleep 1; done
	if [[ "${result[${name}]}" != passed ]]; then
		stop_all
		report
	fi
}

serial preflight preflight
serial modules deps
serial verify verify
serial build build tools
serial unit unit
launch e2e 0 "${mk[@]}" e2e
e2e_started=1
# Until every step has been started and has ended.
while tick && { ! launched race || ! idle e2e fuzz-build race-build fuzz release-check race; }; do
	sleep 1
done
report
