package databasesink

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.DatabaseSink]{
	Columns: common.SinkColumns,
	Cells: func(s *kollect.DatabaseSink) []any {
		return common.SinkCells(string(s.Spec.Type), s.Spec.Endpoint, s.Spec.ExportMinInterval, &s.Status)
	},
}
