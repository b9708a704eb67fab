#!/usr/bin/env bash
# Fails when artifacts/deploy or artifacts/monitoring differ from what
# hack/update-manifests.sh renders from the chart.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT
OUT_DIR="${TMP}" bash "${ROOT}/hack/update-manifests.sh"
status=0
for d in artifacts/deploy artifacts/monitoring; do
	if ! diff -Nur "${ROOT}/${d}" "${TMP}/${d}" >"${TMP}/diff"; then
		echo "verify-manifests: ${d} differs from the chart; run hack/update-manifests.sh and commit the result:" >&2
		head -60 "${TMP}/diff" >&2
		status=1
	fi
done
[[ ${status} -eq 0 ]] && echo "verify-manifests: artifacts/deploy and artifacts/monitoring match charts/kollect"
exit ${status}
