#!/usr/bin/env bash
# Builds the pinned real binaries the local cluster harness (pkg/localcluster,
# `make run`, test/e2e) runs: etcd, kube-apiserver, kube-controller-manager
# and kubectl, from the separate Go module hack/tools (k8s.io/kubernetes
# v1.36.3 with every staging module replaced by v0.36.3;
# go.etcd.io/etcd/server/v3 v3.6.8). Only the Go module proxy is needed.
#
# Output: _output/tools/bin/{etcd,kube-apiserver,kube-controller-manager,kubectl}
# (git-ignored), or $KOLLECT_TOOLS_BIN when set.
# A stamp (sha256 of hack/tools/go.mod and go.sum) skips the build when the
# pinned versions have not changed and the binaries are there; FORCE=1
# rebuilds anyway. Cold (empty Go build cache) on 2 cores it takes 8 to 11
# minutes, about 12 CPU-minutes (measured: 10m38s on a busy machine:
# kube-apiserver 8m, kube-controller-manager 1m40s, kubectl 36s, etcd 15s);
# the Go build cache makes later rebuilds take well under a minute.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_MOD="${ROOT}/hack/tools"
BIN="${KOLLECT_TOOLS_BIN:-${ROOT}/_output/tools/bin}"
STAMP="${BIN}/.stamp"
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl)

die() { echo "build-tools: error: $*" >&2; exit 1; }
log() { echo "build-tools: $*"; }

command -v go >/dev/null 2>&1 ||
	die "Go is not installed or not on PATH; install Go 1.26 or newer (https://go.dev/dl) and retry"
command -v sha256sum >/dev/null 2>&1 ||
	die "sha256sum is not installed (package coreutils); it computes the build stamp"
[[ -f "${TOOLS_MOD}/go.mod" && -f "${TOOLS_MOD}/go.sum" ]] ||
	die "${TOOLS_MOD}/go.mod or go.sum is missing; the tools module pins the binaries"

GOVER="$(go env GOVERSION)"
if [[ ! "${GOVER}" =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
	die "Go ${GOVER} is too old: hack/tools (k8s.io/kubernetes v1.36.3) needs Go 1.26 or newer"
fi

mkdir -p "${BIN}"

# One build at a time (make run and make test may start together).
if command -v flock >/dev/null 2>&1; then
	exec 9>"${BIN}/.lock"
	flock 9
fi

want="$(cat "${TOOLS_MOD}/go.mod" "${TOOLS_MOD}/go.sum" | sha256sum | cut -d' ' -f1)"
have_all=1
for b in "${BINARIES[@]}"; do
	[[ -x "${BIN}/${b}" ]] || have_all=0
done
if [[ "${FORCE:-0}" != 1 && "${have_all}" == 1 && -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" ]]; then
	log "up to date in ${BIN} (stamp ${want:0:12}); FORCE=1 rebuilds"
	exit 0
fi
rm -f "${STAMP}"

cd "${TOOLS_MOD}"
export GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"

modver() { go list -m -f '{{.Version}}' "$1"; }
K8S_VERSION="$(modver k8s.io/kubernetes)" || die "cannot resolve k8s.io/kubernetes in hack/tools/go.mod (module proxy reachable? GOPROXY=$(go env GOPROXY))"
ETCD_VERSION="$(modver go.etcd.io/etcd/server/v3)" || die "cannot resolve go.etcd.io/etcd/server/v3 in hack/tools/go.mod"
K8S_DATE="$(go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
[[ -n "${K8S_DATE}" ]] || K8S_DATE="1970-01-01T00:00:00Z"

# Version stamping as kubernetes' hack/lib/version.sh does, so that
# `kube-apiserver --version` and `kubectl version` report the pinned release.
if [[ ! "${K8S_VERSION}" =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
	die "unexpected k8s.io/kubernetes version ${K8S_VERSION}"
fi
K8S_MAJOR="${BASH_REMATCH[1]}"
K8S_MINOR="${BASH_REMATCH[2]}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION}"
	k8s_ldflags+=" -X ${pkg}.gitMajor=${K8S_MAJOR}"
	k8s_ldflags+=" -X ${pkg}.gitMinor=${K8S_MINOR}"
	k8s_ldflags+=" -X ${pkg}.gitCommit="
	k8s_ldflags+=" -X ${pkg}.gitTreeState=clean"
	k8s_ldflags+=" -X ${pkg}.buildDate=${K8S_DATE}"
done

build() { # name package module-version estimate ldflags
	local name=$1 pkg=$2 ver=$3 est=$4 ldflags=$5 start elapsed
	log "building ${name} (${ver})... ${est} cold"
	start=$(date +%s)
	if ! go build -trimpath -ldflags="${ldflags}" -o "${BIN}/.${name}.tmp" "${pkg}"; then
		rm -f "${BIN}/.${name}.tmp"
		die "go build ${pkg} failed (see above)"
	fi
	mv -f "${BIN}/.${name}.tmp" "${BIN}/${name}"
	elapsed=$(($(date +%s) - start))
	log "built ${name} in $((elapsed / 60))m$((elapsed % 60))s"
}

total_start=$(date +%s)
log "building into ${BIN} with ${GOVER} on $(nproc 2>/dev/null || echo '?') cores"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "k8s.io/kubernetes ${K8S_VERSION}" "~6-8 min" "${k8s_ldflags}"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "k8s.io/kubernetes ${K8S_VERSION}" "~1.5 min" "${k8s_ldflags}"
build kubectl k8s.io/kubernetes/cmd/kubectl "k8s.io/kubernetes ${K8S_VERSION}" "~40 s" "${k8s_ldflags}"
build etcd ./cmd/etcd "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" "~15 s" "-s -w"

echo "${want}" >"${STAMP}"
elapsed=$(($(date +%s) - total_start))
log "done in $((elapsed / 60))m$((elapsed % 60))s: ${BIN}/{$(
	IFS=,
	echo "${BINARIES[*]}"
)}"
