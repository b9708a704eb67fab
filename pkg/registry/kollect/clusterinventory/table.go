package clusterinventory

import (
	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.ClusterInventory]{
	Columns: common.InventoryColumns,
	Cells:   func(inv *kollect.ClusterInventory) []any { return common.InventoryCells(&inv.Status) },
}
