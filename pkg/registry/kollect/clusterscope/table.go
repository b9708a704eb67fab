package clusterscope

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.ClusterScope]{
	Columns: common.ScopeColumns,
	Cells: func(s *kollect.ClusterScope) []any {
		return common.ScopeCells(s.Spec.MinExportInterval, s.Spec.AllowedGVKs, s.Spec.SnapshotSinkRefs, s.Spec.DatabaseSinkRefs, s.Spec.EventSinkRefs)
	},
}
