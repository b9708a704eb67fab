#!/usr/bin/env bash
# Checks that cgo has a working C compiler: the race step (make race, go test
# -race over ./pkg/controllers/...) is the one step built with cgo, and the
# race detector needs it. make test runs this first, so a missing compiler
# is named in seconds, not after the steps before the race step.
#
# The compiler is the one go would run: `go env CC` (CC, else go env -w CC,
# else the toolchain's default, gcc on Linux), split into words as go splits
# it (a wrapper such as "ccache gcc" works), with go env CGO_CFLAGS and
# CGO_LDFLAGS. It must compile and link a program that includes the C
# library headers runtime/cgo includes: gcc without the C library's
# development files (Debian's gcc only recommends libc6-dev) fails here too.
set -euo pipefail

hint="the race step (go test -race over ./pkg/controllers/...) needs cgo and so a C compiler with the C library's headers:
  Debian/Ubuntu: apt-get install gcc libc6-dev   (Fedora: dnf install gcc glibc-devel; Alpine: apk add gcc musl-dev)
  or set CC to a working compiler."
fail() {
	printf 'check-cc: %s\ncheck-cc: %s\n' "$1" "${hint}" >&2
	exit 1
}

# words STRING: STRING split as go splits CC and the CGO_*FLAGS (spaces,
# '...' and "..." quoting), one word a line; xargs knows the same quotes.
words() { [[ -z "$1" ]] || xargs printf '%s\n' <<<"$1"; }

cc=$(CGO_ENABLED=1 go env CC)
[[ -n "${cc}" ]] || fail "go env CC is empty"
mapfile -t cmd < <(words "${cc}")
((${#cmd[@]})) || fail "cannot split go env CC (${cc}) into words"
if ! command -v "${cmd[0]}" >/dev/null; then
	where="on PATH"
	[[ "${cmd[0]}" != */* ]] || where="an executable file"
	fail "no C compiler: ${cmd[0]} (go env CC: ${cc}) is not ${where}"
fi
mapfile -t cflags < <(words "$(CGO_ENABLED=1 go env CGO_CFLAGS)")
mapfile -t ldflags < <(words "$(CGO_ENABLED=1 go env CGO_LDFLAGS)")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kollect-check-cc.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT
cat >"${tmp}/cc.c" <<'EOF'
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *run(void *arg) { return arg; }
int main(void) {
	pthread_t t;
	if (pthread_create(&t, NULL, run, NULL) != 0) return 1;
	return pthread_join(t, NULL);
}
EOF
if ! out=$("${cmd[@]}" "${cflags[@]}" -o "${tmp}/cc" "${tmp}/cc.c" -pthread "${ldflags[@]}" 2>&1); then
	fail "the C compiler (go env CC: ${cc}) cannot compile and link a C program with pthread.h and stdlib.h:
$(head -5 <<<"${out}")"
fi
echo "check-cc: ${cc} compiles and links for cgo (the race step)"
