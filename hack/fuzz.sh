#!/usr/bin/env bash
# Runs every Fuzz* target in the module for a bounded time each. A panic or
# a failed property stops the run with the failing input saved in testdata/.
# Minimizing a new input is capped at 2s: a minimization still running when
# -fuzztime ends is reported as a failure ("context deadline exceeded").
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
targets=$(grep -rlE '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' --include='*_test.go' pkg cmd || true)
for file in ${targets}; do
    pkg=./$(dirname "${file}")
    for fn in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "${file}" | cut -d' ' -f2); do
        echo "fuzz ${pkg} ${fn} for ${fuzztime}"
        go test -run='^$' -fuzz="^${fn}\$" -fuzztime="${fuzztime}" -fuzzminimizetime=2s "${pkg}" >/tmp/kollect-fuzz.log 2>&1 || { cat /tmp/kollect-fuzz.log; exit 1; }
    done
done
