#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a bounded time each. A panic or
# a failed property stops the run with the failing input saved in testdata/.
# Minimizing a new input is capped at 2s; a minimization still running when
# -fuzztime ends is reported as a failure ("context deadline exceeded")
# without a failing input, and that target runs once more.
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
targets=$(grep -rlE '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' --include='*_test.go' pkg cmd || true)
for file in ${targets}; do
    pkg=./$(dirname "${file}")
    for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "${file}" | cut -d' ' -f2); do
        echo "fuzz ${pkg} ${fn} for ${fuzztime}"
        for try in 1 2; do
            if go test -run='^$' -fuzz="^${fn}\$" -fuzztime="${fuzztime}" -fuzzminimizetime=2s "${pkg}" >/tmp/kollect-fuzz.log 2>&1; then
                break
            fi
            # The fuzzer also reports "context deadline exceeded" when
            # -fuzztime ends while it minimizes a new coverage input: no
            # failing input, nothing found. Once, that is tried again.
            if [ "${try}" = 1 ] && grep -q 'context deadline exceeded' /tmp/kollect-fuzz.log && ! grep -q 'Failing input written' /tmp/kollect-fuzz.log; then
                echo "fuzz ${pkg} ${fn}: the run ended while minimizing a new input (no failing input); running it again"
                continue
            fi
            cat /tmp/kollect-fuzz.log
            exit 1
        done
    done
done
