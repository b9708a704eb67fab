package inventory

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.Inventory]{
	Columns: common.InventoryColumns,
	Cells:   func(inv *kollect.Inventory) []any { return common.InventoryCells(&inv.Status) },
}
