package snapshotsink

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.SnapshotSink]{
	Columns: common.SinkColumns,
	Cells: func(s *kollect.SnapshotSink) []any {
		return common.SinkCells(string(s.Spec.Type), s.Spec.Endpoint, s.Spec.ExportMinInterval, &s.Status)
	},
}
