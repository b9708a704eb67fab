package target

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.Target]{
	Columns: []metav1.TableColumnDefinition{
		common.Column("Profile", "The Profile items are extracted with."),
		common.Column("Items", "How many items the target holds."),
		common.Column("Ready", "Whether collection is current, or why not."),
		common.WideColumn("Selector", "The label selector of collected objects."),
		common.WideColumn("Suspended", "Whether collection is suspended."),
	},
	Cells: func(t *kollect.Target) []any {
		return []any{t.Spec.ProfileRef.Name, common.ItemCount(t.Status.Collection), common.ConditionStatus(t.Status.Conditions, kollect.ConditionReady),
			common.Selector(t.Spec.LabelSelector), t.Spec.Suspend}
	},
}
