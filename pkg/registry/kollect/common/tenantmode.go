package common

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// TenantModeStatus is the status admission of a cluster kind (resource):
// with --tenant-mode, writing its status is an update like any other and is
// refused, as the main resource refuses it (tenancy.Checker). Only the
// server's own controllers, which report on objects created before tenant
// mode was turned on through the loopback client (system:apiserver), may
// still write it. Without tenant mode it checks nothing.
func TenantModeStatus(cfg tenancy.Config, resource string) StatusAdmission {
	if !cfg.TenantMode {
		return nil
	}
	return func(ctx context.Context, obj, _ runtime.Object) error {
		if u, ok := genericapirequest.UserFrom(ctx); ok && u.GetName() == user.APIServerUser {
			return nil
		}
		name := ""
		if m, err := meta.Accessor(obj); err == nil {
			name = m.GetName()
		}
		return apierrors.NewForbidden(kollect.Resource(resource), name, errors.New(tenancy.TenantModeMessage))
	}
}
