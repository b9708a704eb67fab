#!/usr/bin/env bash
# Renders the Helm chart charts/kollect into the plain install manifests, so
# the chart is the one source of truth for both ways of installing:
#
#   artifacts/deploy/NN-*.yaml      helm template with hack/manifests-values.yaml,
#                                   one file per chart template (namespace kollect-system)
#   artifacts/monitoring/           the chart's alert rules and Grafana dashboard
#
# OUT_DIR renders somewhere else (hack/verify-manifests.sh compares with it).
# Needs the pinned helm (hack/build-tools.sh helm, built here when missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT_DIR:-${ROOT}}"
BIN="${KOLLECT_TOOLS_BIN:-${ROOT}/_output/tools/bin}"
bash "${ROOT}/hack/build-tools.sh" helm || {
	echo "update-manifests: building the pinned helm failed; run hack/build-tools.sh helm to see why" >&2
	exit 1
}

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
"${BIN}/helm" template kollect "${ROOT}/charts/kollect" --namespace kollect-system \
	--values "${ROOT}/hack/manifests-values.yaml" --output-dir "${tmp}" >/dev/null

mkdir -p "${OUT}/artifacts/deploy" "${OUT}/artifacts/monitoring"
rm -f "${OUT}"/artifacts/deploy/[0-9][0-9]-*.yaml
for f in "${tmp}"/kollect/templates/*.yaml; do
	# helm writes "---" and "# Source: ..." before each document and a blank
	# line after it; in a plain manifest file these are noise.
	sed -e '/^# Source: /d' "${f}" | sed -e '1{/^---$/d}' |
		awk '$0 == "" { blank++; next } $0 != "---" { while (blank > 0) { print ""; blank-- } } { blank = 0; print }' \
			>"${OUT}/artifacts/deploy/$(basename "${f}")"
done
cp "${ROOT}/charts/kollect/files/prometheus-rules.yaml" "${ROOT}/charts/kollect/files/grafana-dashboard.json" \
	"${OUT}/artifacts/monitoring/"
