#!/usr/bin/env bash
# Fails when the committed generated code differs from what
# hack/update-codegen.sh produces from the current API types.
set -o errexit
set -o nounset
set -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

# Work on a copy so a stale tree is reported, not silently fixed.
mkdir -p "${TMP}/src"
(cd "${ROOT}" && tar --exclude=./_output --exclude=./.git -cf - .) | (cd "${TMP}/src" && tar -xf -)
mkdir -p "${TMP}/src/_output"
[[ -d "${ROOT}/_output/bin" ]] && cp -a "${ROOT}/_output/bin" "${TMP}/src/_output/"
echo "verify-codegen: regenerating into a scratch copy"
(cd "${TMP}/src" && ./hack/update-codegen.sh >/dev/null)

status=0
for d in pkg/apis pkg/generated hack/api-rules-violations.list; do
    if ! diff -Naupr "${ROOT}/${d}" "${TMP}/src/${d}" >"${TMP}/diff" 2>&1; then
        echo "verify-codegen: ${d} is stale; run hack/update-codegen.sh and commit the result:" >&2
        head -50 "${TMP}/diff" >&2
        status=1
    fi
done
[[ ${status} -eq 0 ]] && echo "verify-codegen: generated code is up to date"
exit ${status}
