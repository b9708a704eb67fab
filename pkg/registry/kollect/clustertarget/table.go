package clustertarget

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.ClusterTarget]{
	Columns: []metav1.TableColumnDefinition{
		common.Column("Profile", "The Profile items are extracted with, as namespace/name."),
		common.Column("Namespaces", "How many namespaces are collected from."),
		common.Column("Items", "How many items the target holds."),
		common.Column("Ready", "Whether collection is current, or why not."),
		common.WideColumn("Namespace Selector", "The label selector of collected namespaces."),
		common.WideColumn("Suspended", "Whether collection is suspended."),
	},
	Cells: func(t *kollect.ClusterTarget) []any {
		return []any{t.Spec.ProfileRef.Namespace + "/" + t.Spec.ProfileRef.Name, int64(len(t.Status.MatchedNamespaces)),
			common.ItemCount(t.Status.Collection), common.ConditionStatus(t.Status.Conditions, kollect.ConditionReady),
			common.Selector(t.Spec.NamespaceSelector), t.Spec.Suspend}
	},
}
