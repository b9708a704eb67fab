package clusterinventoryitem

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.ClusterInventoryItem]{
	Columns: common.ItemColumns,
	Cells: func(i *kollect.ClusterInventoryItem) []any {
		return common.ItemCells(&i.ObjectMeta, &i.Source, i.Hash)
	},
}
