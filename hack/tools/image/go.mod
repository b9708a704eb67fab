// Module kollect.dev/kollect/hack/tools/image writes the kollect-apiserver
// container image without a container engine (hack/build-image.sh, `make
// image`). Its own module, so that go-containerregistry and its dependencies
// never become the product's: the server's go.mod stays as it is, and only
// the packages that assemble and write an image (pkg/v1, mutate, empty,
// layout, tarball, name; not authn or remote) are built. Run it with
// GOWORK=off from this directory.
module kollect.dev/kollect/hack/tools/image

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
