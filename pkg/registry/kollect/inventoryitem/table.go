package inventoryitem

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.InventoryItem]{
	Columns: common.ItemColumns,
	Cells: func(i *kollect.InventoryItem) []any {
		return common.ItemCells(&i.ObjectMeta, &i.Source, i.Hash)
	},
}
