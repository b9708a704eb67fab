#!/usr/bin/env bash
# A `go test -exec` wrapper: runs one test binary under the lock that keeps
# the machine's PostgreSQL from being stopped while tests use it. The export
# end-to-end suite stops and restarts that server (its outage tests); every
# other package that reads KOLLECT_TEST_POSTGRES_DSN needs it up throughout.
#
# go test runs the wrapper in the package's directory; its test files decide:
#
#   stop the server (they name KOLLECT_TEST_POSTGRES_CTL, the   exclusive lock
#   command they stop it with, as test/e2e/export does)
#   read KOLLECT_TEST_POSTGRES_DSN                             shared lock
#   neither                                                    no lock
#
# so a package that stops PostgreSQL runs alone with respect to every
# package that uses it, in this `make test` and in any other on the machine
# (the lock file is per machine), whatever the timing; the others share it.
# flock(1) holds the lock and runs the binary without the lock's descriptor
# (-o): a server a test starts (pg_ctlcluster) must not inherit it.
#
# Usage: go test -exec "$PWD/hack/postgres-lock.sh" PKGS...
#        hack/postgres-lock.sh --mode DIR   prints exclusive, shared or none
#                                           for the package in DIR
# KOLLECT_POSTGRES_LOCK overrides the lock file (default
# /tmp/kollect-postgres.lock).
set -euo pipefail

lock=${KOLLECT_POSTGRES_LOCK:-/tmp/kollect-postgres.lock}

mode_of() { # DIR
	if grep -qs KOLLECT_TEST_POSTGRES_CTL "$1"/*_test.go; then
		echo exclusive
	elif grep -qs KOLLECT_TEST_POSTGRES_DSN "$1"/*_test.go; then
		echo shared
	else
		echo none
	fi
}
if [[ "${1:-}" == --mode ]]; then
	mode_of "${2:?usage: hack/postgres-lock.sh --mode DIR}"
	exit 0
fi

mode=$(mode_of .)
[[ "${mode}" != none ]] || exec "$@"

command -v flock >/dev/null ||
	{ echo "postgres-lock: flock is missing (package util-linux): it keeps PostgreSQL up while tests use it" >&2; exit 1; }
# Say so when it has to wait (the line is in the package's output): the
# test's own -timeout starts once the binary runs, but go test's kill timer
# (-timeout plus a minute) already runs while it waits.
flock --nonblock "--${mode}" "${lock}" true ||
	echo "postgres-lock: $(date +%T) $(basename "${PWD}") waits for the ${mode} lock on the machine's PostgreSQL (${lock})" >&2
exec flock --close "--${mode}" "${lock}" "$@"
