#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a bounded time each. A panic or
# a failed property stops the run with the failing input saved in testdata/.
# Minimizing a new input is capped at 2s; a minimization still running when
# -fuzztime ends is reported as a failure ("context deadline exceeded")
# without a failing input, and that target runs once more.
#
# Usage: hack/fuzz.sh [FUZZTIME]      (default 10s)
#        hack/fuzz.sh --compile-only  builds what the fuzz runs need (every
#        package instrumented for fuzzing, vetted) and fuzzes nothing: make
#        test does this early, at low priority, in the cycles other steps
#        leave idle
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-10s}
targets=$(grep -rlE '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' --include='*_test.go' pkg cmd || true)

if [[ "${fuzztime}" == --compile-only ]]; then
    # -fuzz='^$' instruments as any -fuzz does and matches no target.
    for pkg in $(for file in ${targets}; do echo "./$(dirname "${file}")"; done | sort -u); do
        echo "fuzz: compiling ${pkg} instrumented for fuzzing"
        go test -count=1 -run='^$' -fuzz='^$' "${pkg}" >/dev/null
    done
    exit 0
fi

log=$(mktemp "${TMPDIR:-/tmp}/kollect-fuzz.XXXXXX")
trap 'rm -f "${log}"' EXIT
for file in ${targets}; do
    pkg=./$(dirname "${file}")
    mapfile -t fns < <(grep -oE '^func Fuzz[A-Za-z0-9_]+' "${file}" | cut -d' ' -f2)
    for fn in "${fns[@]}"; do
        echo "fuzz ${pkg} ${fn} for ${fuzztime}"
        for try in 1 2; do
            if go test -run='^$' -fuzz="^${fn}\$" -fuzztime="${fuzztime}" -fuzzminimizetime=2s "${pkg}" >"${log}" 2>&1; then
                break
            fi
            # The fuzzer also reports "context deadline exceeded" when
            # -fuzztime ends while it minimizes a new coverage input: no
            # failing input, nothing found. Once, that is tried again.
            if [ "${try}" = 1 ] && grep -q 'context deadline exceeded' "${log}" && ! grep -q 'Failing input written' "${log}"; then
                echo "fuzz ${pkg} ${fn}: the run ended while minimizing a new input (no failing input); running it again"
                continue
            fi
            cat "${log}"
            exit 1
        done
    done
done
