#!/usr/bin/env bash
# Builds the kollect-apiserver container image without a container engine
# (`make image`): a static binary, then an OCI image written by the Go
# builder in hack/tools/image (go-containerregistry, its own module).
#
#   IMAGE   the image reference, the one variable (default:
#           ghcr.io/kollect-dev/kollect-apiserver:<appVersion of charts/kollect/Chart.yaml>).
#           Its tag is also the version the binary reports (--version).
#   OUT     output directory (default: _output/image)
#   GOARCH  the image's architecture (default: amd64); CGO is off, so
#           GOARCH=arm64 cross-builds from any machine
#   SOURCE_DATE_EPOCH  the time stamped into the image and the binary
#           (default: the time of the last commit, else 0)
#   BINARY  use this static binary instead of building one (what the test
#           uses to build the image twice from the same binary)
#
# Output, in $OUT: kollect-apiserver (the binary), oci/ (an OCI image layout),
# kollect-apiserver.oci.tar (the same as one file: skopeo's oci-archive:),
# kollect-apiserver.docker.tar (for `docker load`). The same binary always
# gives the same image digest. Only the Go module proxy is needed; the
# Dockerfile at the repository root builds the same image with Docker.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-${ROOT}/_output/image}"
TOOLS_BIN="${ROOT}/_output/bin"
BUILDER_DIR="${ROOT}/hack/tools/image"
CHART="${ROOT}/charts/kollect/Chart.yaml"
REPOSITORY="ghcr.io/kollect-dev/kollect-apiserver"

die() { echo "build-image: error: $*" >&2; exit 1; }
log() { echo "build-image: $*"; }
start=$(date +%s)

command -v go >/dev/null 2>&1 ||
	die "Go is not installed or not on PATH; install Go 1.26 or newer (https://go.dev/dl) and retry"
GOVER="$(go env GOVERSION)"
if [[ ! "${GOVER}" =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
	die "Go ${GOVER} is too old: kollect-apiserver needs Go 1.26 or newer"
fi
[[ -f "${BUILDER_DIR}/go.mod" && -f "${BUILDER_DIR}/go.sum" ]] ||
	die "${BUILDER_DIR}/go.mod or go.sum is missing; it pins the image builder"

# The image reference: IMAGE, else the chart's repository at its appVersion.
if [[ -z "${IMAGE:-}" ]]; then
	[[ -f "${CHART}" ]] || die "${CHART} is missing: it holds appVersion, the default image tag (or set IMAGE)"
	app_version="$(sed -n 's/^appVersion:[[:space:]]*["'\'']\{0,1\}\([^"'\''[:space:]]*\).*/\1/p' "${CHART}")"
	[[ -n "${app_version}" ]] || die "no appVersion in ${CHART} (or set IMAGE)"
	IMAGE="${REPOSITORY}:${app_version}"
fi
[[ "${IMAGE}" != *@* ]] || die "IMAGE=${IMAGE}: give a repository:tag, not a digest"
last="${IMAGE##*/}"
[[ "${last}" == *:* ]] || die "IMAGE=${IMAGE} has no tag: give repository:tag (the tag is also the version the binary reports)"
VERSION="${last##*:}"
[[ "${VERSION}" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "IMAGE=${IMAGE}: '${VERSION}' is not a valid tag"

# Build information, as reproducible as the tree: the commit and its time.
commit="" tree_state=""
if git -C "${ROOT}" rev-parse --verify -q HEAD >/dev/null 2>&1; then
	commit="$(git -C "${ROOT}" rev-parse HEAD)"
	if [[ -z "$(git -C "${ROOT}" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
		tree_state=clean
	else
		tree_state=dirty
	fi
	: "${SOURCE_DATE_EPOCH:=$(git -C "${ROOT}" log -1 --format=%ct HEAD)}"
fi
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
[[ "${SOURCE_DATE_EPOCH}" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} is not a Unix time"
export SOURCE_DATE_EPOCH
build_date="$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null ||
	date -u -r "${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
ARCH="${GOARCH:-amd64}"

mkdir -p "${OUT}" "${TOOLS_BIN}"
OUT="$(cd "${OUT}" && pwd)"
# One build per output directory at a time.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${OUT}/.lock"
	flock 9
fi

log "image ${IMAGE} (version ${VERSION}, linux/${ARCH}, ${GOVER}), output in ${OUT}"

download() { # download DIR WHAT
	log "downloading the Go modules of $2 (go mod download; cached after the first time)..."
	(cd "$1" && GOWORK=off GOFLAGS=-mod=readonly go mod download) ||
		die "go mod download for $2 failed: is the Go module proxy reachable? (GOPROXY=$(go env GOPROXY))"
}

# 1. The static binary.
if [[ -n "${BINARY:-}" ]]; then
	[[ -f "${BINARY}" ]] || die "BINARY=${BINARY} does not exist"
	if [[ "$(cd "$(dirname "${BINARY}")" && pwd)/$(basename "${BINARY}")" != "${OUT}/kollect-apiserver" ]]; then
		cp -f "${BINARY}" "${OUT}/.kollect-apiserver.tmp"
		mv -f "${OUT}/.kollect-apiserver.tmp" "${OUT}/kollect-apiserver"
	fi
	log "using the binary ${BINARY} (not building one)"
else
	download "${ROOT}" "kollect-apiserver"
	# main.version and friends, not k8s.io/component-base/version: see
	# cmd/kollect-apiserver/main.go. The same flags as the Dockerfile's.
	ldflags="-s -w -X main.version=${VERSION} -X main.gitCommit=${commit} -X main.gitTreeState=${tree_state} -X main.buildDate=${build_date}"
	log "building kollect-apiserver (CGO_ENABLED=0 GOOS=linux GOARCH=${ARCH}, -trimpath; a few minutes the first time)..."
	t=$(date +%s)
	if ! (cd "${ROOT}" && GOWORK=off CGO_ENABLED=0 GOOS=linux GOARCH="${ARCH}" \
		go build -trimpath -buildvcs=false -ldflags="${ldflags}" -o "${OUT}/.kollect-apiserver.tmp" ./cmd/kollect-apiserver); then
		rm -f "${OUT}/.kollect-apiserver.tmp"
		die "go build ./cmd/kollect-apiserver failed (see above)"
	fi
	mv -f "${OUT}/.kollect-apiserver.tmp" "${OUT}/kollect-apiserver"
	log "built ${OUT}/kollect-apiserver in $(($(date +%s) - t))s"
fi

# 2. The image builder, for this machine (not GOARCH).
download "${BUILDER_DIR}" "the image builder (hack/tools/image)"
log "building the image builder (hack/tools/image)..."
if ! (cd "${BUILDER_DIR}" && env -u GOOS -u GOARCH GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly \
	go build -o "${TOOLS_BIN}/.kollect-image.$$" .); then
	rm -f "${TOOLS_BIN}/.kollect-image.$$"
	die "go build in hack/tools/image failed (see above)"
fi
mv -f "${TOOLS_BIN}/.kollect-image.$$" "${TOOLS_BIN}/kollect-image"

# 3. The image.
log "writing the image..."
"${TOOLS_BIN}/kollect-image" \
	-binary "${OUT}/kollect-apiserver" \
	-image "${IMAGE}" \
	-version "${VERSION}" \
	-revision "${commit}" \
	-platform "linux/${ARCH}" \
	-source-date-epoch "${SOURCE_DATE_EPOCH}" \
	-out "${OUT}" ||
	die "the image builder failed (see above)"

log "done in $(($(date +%s) - start))s. To use it:"
echo "  docker load -i ${OUT}/kollect-apiserver.docker.tar"
echo "  skopeo copy oci-archive:${OUT}/kollect-apiserver.oci.tar docker://${IMAGE}"
echo "  crane push ${OUT}/oci ${IMAGE}"
