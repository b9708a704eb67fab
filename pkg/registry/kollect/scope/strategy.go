// Package scope is the registry of Scopes: static limits with no status.
package scope

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// kind describes Scopes to the shared strategy; the generation follows its spec.
var kind = common.Static[*kollect.Scope]{
	Meta:           func(o *kollect.Scope) *metav1.ObjectMeta { return &o.ObjectMeta },
	Content:        func(o *kollect.Scope) any { return o.Spec },
	Validate:       validation.ValidateScope,
	ValidateUpdate: validation.ValidateScopeUpdate,
}
