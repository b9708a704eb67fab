#!/usr/bin/env bash
# Builds the pinned real binaries the tests and `make run` use, each set from
# its own Go module under hack/tools, so that no tool's dependencies become
# the product's or another tool's:
#
#   kube      hack/tools           etcd, kube-apiserver, kube-controller-manager,
#                                  kubectl (k8s.io/kubernetes v1.36.3 with every
#                                  staging module replaced by v0.36.3; etcd v3.6.8)
#   helm      hack/tools/helm      helm (helm.sh/helm/v4)
#   promtool  hack/tools/promtool  promtool (github.com/prometheus/prometheus)
#
# Usage: hack/build-tools.sh [SET...]   (no argument: every set)
# Only the Go module proxy is needed. Output: _output/tools/bin, or
# $KOLLECT_TOOLS_BIN when set (git-ignored).
#
# Each set has a stamp, the sha256 of its go.mod and go.sum: a set whose pins
# have not changed and whose binaries are there is not rebuilt; FORCE=1
# rebuilds anyway. Cold on 2 cores (measured by hack/fresh-check.sh) the kube
# set takes 5.5 to 6.5 minutes (kube-apiserver 3.5 to 4 of them) once `make
# build` has compiled the Kubernetes libraries it shares (the Makefile builds
# everything static and -trimpath, as here, so the cache is shared), about 11
# without; promtool about 2, helm about 2; the Go build cache makes later
# rebuilds take seconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${KOLLECT_TOOLS_BIN:-${ROOT}/_output/tools/bin}"

die() { echo "build-tools: error: $*" >&2; exit 1; }
log() { echo "build-tools: $*"; }

command -v go >/dev/null 2>&1 ||
	die "Go is not installed or not on PATH; install Go 1.26 or newer (https://go.dev/dl) and retry"
command -v sha256sum >/dev/null 2>&1 ||
	die "sha256sum is not installed (package coreutils); it computes the build stamps"
GOVER="$(go env GOVERSION)"
if [[ ! "${GOVER}" =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
	die "Go ${GOVER} is too old: the pinned tools need Go 1.26 or newer"
fi

# The sets: module directory and "name=package" pairs, built in this order.
declare -A MODULE=([kube]=hack/tools [helm]=hack/tools/helm [promtool]=hack/tools/promtool)
declare -A TARGETS=(
	[kube]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager kubectl=k8s.io/kubernetes/cmd/kubectl etcd=./cmd/etcd"
	[helm]="helm=helm.sh/helm/v4/cmd/helm"
	[promtool]="promtool=github.com/prometheus/prometheus/cmd/promtool"
)
# Build tags per set (promtool: leave out the service-discovery plugins,
# which rule checks and rule unit tests never use).
declare -A TAGS=([kube]="" [helm]="" [promtool]="remove_all_sd")
ALL_SETS=(kube helm promtool)

sets=("$@")
((${#sets[@]})) || sets=("${ALL_SETS[@]}")
for s in "${sets[@]}"; do
	[[ -n "${MODULE[$s]:-}" ]] || die "unknown tool set '${s}' (known: ${ALL_SETS[*]})"
done

mkdir -p "${BIN}"

export GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly"

# ldflags_for SET: version stamping as kubernetes' hack/lib/version.sh does,
# so `kube-apiserver --version` and `kubectl version` report the pinned
# release; helm reads its version from the module.
ldflags_for() {
	local set=$1 dir=$2 flags="-s -w" ver major minor date pkg
	case "${set}" in
	kube)
		ver="$(cd "${dir}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)" ||
			die "cannot resolve k8s.io/kubernetes in ${dir}/go.mod"
		[[ "${ver}" =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "unexpected k8s.io/kubernetes version ${ver}"
		major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
		date="$(cd "${dir}" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
		for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			flags+=" -X ${pkg}.gitVersion=${ver} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
			flags+=" -X ${pkg}.gitCommit= -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date:-1970-01-01T00:00:00Z}"
		done
		;;
	helm)
		ver="$(cd "${dir}" && go list -m -f '{{.Version}}' helm.sh/helm/v4)" || die "cannot resolve helm.sh/helm/v4 in ${dir}/go.mod"
		flags+=" -X helm.sh/helm/v4/internal/version.version=${ver}"
		;;
	promtool)
		# Prometheus v3.X.Y is published as the Go module version v0.3XX.Y.
		ver="$(cd "${dir}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)" ||
			die "cannot resolve github.com/prometheus/prometheus in ${dir}/go.mod"
		[[ "${ver}" =~ ^v0\.3([0-9]{2})\.([0-9]+)$ ]] && ver="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
		flags+=" -X github.com/prometheus/common/version.Version=${ver#v}"
		;;
	esac
	echo "${flags}"
}

# stamp_of SET: what the set's binaries are built from: its pins, the Go
# toolchain and the build tags.
stamp_of() {
	local dir="${ROOT}/${MODULE[$1]}"
	{ cat "${dir}/go.mod" "${dir}/go.sum"; echo "${GOVER} tags=${TAGS[$1]}"; } | sha256sum | cut -d' ' -f1
}

# up_to_date SET: the set's binaries are there and its stamp is current.
up_to_date() {
	local set=$1 t
	[[ "${FORCE:-0}" != 1 && -f "${BIN}/.stamp-${set}" && "$(cat "${BIN}/.stamp-${set}")" == "$(stamp_of "${set}")" ]] || return 1
	for t in ${TARGETS[$set]}; do
		[[ -x "${BIN}/${t%%=*}" ]] || return 1
	done
}

build_set() {
	local set=$1 dir="${ROOT}/${MODULE[$1]}" stamp="${BIN}/.stamp-$1" t name pkg start elapsed ldflags
	[[ -f "${dir}/go.mod" && -f "${dir}/go.sum" ]] || die "${dir}/go.mod or go.sum is missing; it pins the ${set} tools"
	if up_to_date "${set}"; then
		log "${set}: up to date; FORCE=1 rebuilds"
		return 0
	fi
	# One build of a set at a time (make run and make test may start
	# together); whoever waited finds it built.
	if ! command -v flock >/dev/null 2>&1; then
		log "warning: flock (util-linux) is missing: concurrent builds of ${set} are not serialized"
	else
		exec 9>"${BIN}/.lock-${set}"
		flock 9
		if up_to_date "${set}"; then
			log "${set}: built meanwhile by another run"
			exec 9>&-
			return 0
		fi
	fi
	rm -f "${stamp}"
	bash "${ROOT}/hack/download-modules.sh" "${dir}" || die "cannot download the modules of ${dir}"
	ldflags="$(ldflags_for "${set}" "${dir}")"
	for t in ${TARGETS[$set]}; do
		name=${t%%=*} pkg=${t#*=}
		log "${set}: building ${name} (${pkg})..."
		start=$(date +%s)
		if ! (cd "${dir}" && go build -trimpath -tags="${TAGS[$set]}" -ldflags="${ldflags}" -o "${BIN}/.${name}.tmp" "${pkg}"); then
			rm -f "${BIN}/.${name}.tmp"
			die "go build ${pkg} in ${dir} failed (see above)"
		fi
		mv -f "${BIN}/.${name}.tmp" "${BIN}/${name}"
		elapsed=$(($(date +%s) - start))
		log "${set}: built ${name} in $((elapsed / 60))m$((elapsed % 60))s"
	done
	stamp_of "${set}" >"${stamp}"
	exec 9>&- # releases the lock
}

total_start=$(date +%s)
for s in "${sets[@]}"; do
	build_set "${s}"
done
elapsed=$(($(date +%s) - total_start))
log "${sets[*]}: ready in ${BIN} ($((elapsed / 60))m$((elapsed % 60))s, ${GOVER}, $(nproc 2>/dev/null || echo '?') cores)"
