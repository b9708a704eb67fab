//go:build tools

// Package tools pins the code generators hack/update-codegen.sh runs, so
// go.mod records their version.
package tools

import (
	_ "k8s.io/code-generator"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
)
