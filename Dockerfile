# syntax=docker/dockerfile:1
#
# The kollect-apiserver image, for those who build with Docker (BuildKit):
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/kollect-dev/kollect-apiserver:v0.1.0 .
#
# `make image` (hack/build-image.sh) is the daemonless path: it needs only Go,
# builds the same static binary with the same flags and writes the same image
# layout (an OCI layout, an oci-archive and a `docker load` tarball in
# _output/image), reproducibly. Both put the same files in the image, written
# by the same code (hack/tools/image; here with -rootfs):
#
#   /kollect-apiserver                  0755 0:0
#   /etc/passwd, /etc/group             root and nonroot (65532)
#   /etc/ssl/certs/ca-certificates.crt  Mozilla's roots (golang.org/x/crypto/x509roots/fallback)
#   /tmp                                1777
#   /var/lib/kollect                    0700 65532:65532, the --data-dir volume
#
# and both run as 65532:65532 with /kollect-apiserver as the entrypoint.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
# TARGETARCH is set by BuildKit (docker build --platform linux/arm64 cross-builds; CGO is off).
ARG TARGETARCH
# The version --version reports; hack/build-image.sh uses the image tag.
ARG VERSION=v0.0.0-dev
ARG GIT_COMMIT=""
ARG GIT_TREE_STATE=""
# The time of the binary's build date and of the image's files.
ARG SOURCE_DATE_EPOCH=0
WORKDIR /src
COPY go.mod go.sum ./
COPY hack/tools/image/go.mod hack/tools/image/go.sum hack/tools/image/
RUN go mod download && cd hack/tools/image && GOWORK=off go mod download
COPY . .
RUN build_date="$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)" && \
	CGO_ENABLED=0 GOOS=linux GOARCH="${TARGETARCH:-amd64}" go build -trimpath -buildvcs=false \
	-ldflags "-s -w -X main.version=${VERSION} -X main.gitCommit=${GIT_COMMIT} -X main.gitTreeState=${GIT_TREE_STATE} -X main.buildDate=${build_date}" \
	-o /out/kollect-apiserver ./cmd/kollect-apiserver
RUN cd hack/tools/image && GOWORK=off CGO_ENABLED=0 go run . \
	-binary /out/kollect-apiserver -platform "linux/${TARGETARCH:-amd64}" \
	-source-date-epoch "${SOURCE_DATE_EPOCH}" -rootfs /rootfs

FROM scratch
ARG VERSION=v0.0.0-dev
# BuildKit keeps the owners and modes the build stage set on what it copies.
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /
VOLUME ["/var/lib/kollect"]
EXPOSE 8443/tcp
ENTRYPOINT ["/kollect-apiserver"]
LABEL org.opencontainers.image.title="kollect-apiserver" \
	org.opencontainers.image.description="Kollect: a live inventory of a Kubernetes cluster, served as the aggregated API kollect.dev/v1alpha1" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.source="https://github.com/kollect-dev/kollect"
