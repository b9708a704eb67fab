package eventsink

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.EventSink]{
	Columns: common.SinkColumns,
	Cells: func(s *kollect.EventSink) []any {
		return common.SinkCells(string(s.Spec.Type), s.Spec.Endpoint, s.Spec.ExportMinInterval, &s.Status)
	},
}
