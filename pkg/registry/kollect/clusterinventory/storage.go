package clusterinventory

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of clusterinventories and clusterinventories/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	withFirst := kind
	withFirst.Start = func(ctx context.Context, inv *kollect.ClusterInventory) {
		if s := &inv.Spec; s.Suspend || len(s.SnapshotSinkRefs)+len(s.DatabaseSinkRefs)+len(s.EventSinkRefs) == 0 {
			return // no exporters: nothing to look up, or to ask
		}
		inv.Status.SinkExports = opts.FirstEntries.Entries(ctx, scheme, inv, &v1alpha1.ClusterInventory{}, func(ctx context.Context) bool {
			return len(validation.ValidateClusterInventory(inv)) == 0 && opts.Checker.MayGet(ctx, "clusterinventories", inv.Namespace, inv.Name) &&
				opts.Checker.ClusterInventories().AdmitCreate(ctx, inv) == nil
		})
	}
	main, status := withFirst.Strategies(common.NewBase(scheme, false, opts.Clock))
	k := common.Kind{
		Resource: "clusterinventories", Singular: "clusterinventory", ShortNames: []string{"cinv"},
		New:      func() runtime.Object { return &kollect.ClusterInventory{} },
		NewList:  func() runtime.Object { return &kollect.ClusterInventoryList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Created: func(obj runtime.Object) {
			if len(obj.(*kollect.ClusterInventory).Status.SinkExports) > 0 {
				opts.FirstEntries.Created(scheme, obj, &v1alpha1.ClusterInventory{})
			}
		},
		Admission: opts.Checker.WithQuota(tenancy.CountClusterInventories, opts.Checker.ClusterInventories()),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	// With --tenant-mode a user's status write is refused like any update.
	statusREST := common.NewStatusREST(store, status).WithAdmission(common.TenantModeStatus(opts.Tenancy, k.Resource))
	return common.NewREST(store, k), statusREST, nil
}
