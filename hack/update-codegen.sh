#!/usr/bin/env bash
# Regenerates deepcopy, defaulters, conversions, OpenAPI, the clientset with
# apply configurations, listers and informers with k8s.io/code-generator's
# kube_codegen.sh, at the version pinned in go.mod.
set -o errexit
set -o nounset
set -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "${ROOT}"
THIS_PKG=kollect.dev/kollect
if [[ -z "${CODEGEN_PKG:-}" ]]; then
    # An empty module cache has no copy yet: download the pinned version
    # (go.mod) first, so a fresh clone needs nothing done by hand.
    if ! go mod download k8s.io/code-generator; then
        echo "update-codegen: cannot download k8s.io/code-generator (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))" >&2
        exit 1
    fi
    CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
fi
if [[ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]]; then
    echo "update-codegen: ${CODEGEN_PKG:-k8s.io/code-generator}/kube_codegen.sh is missing; is k8s.io/code-generator pinned in go.mod?" >&2
    exit 1
fi
# The generators are built into the git-ignored tool folder, not $GOPATH/bin.
export GOBIN="${ROOT}/_output/bin"
mkdir -p "${GOBIN}"
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

report_args=(--report-filename "${ROOT}/hack/api-rules-violations.list")
if [[ "${UPDATE_API_KNOWN_VIOLATIONS:-}" == "true" ]]; then
    report_args+=(--update-report)
fi
kube::codegen::gen_openapi \
    --output-dir "${ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --output-model-name-file "zz_generated.model_name.go" \
    "${report_args[@]}" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run "${THIS_PKG}/pkg/generated/openapi/cmd/models-schema") \
    --output-dir "${ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"
