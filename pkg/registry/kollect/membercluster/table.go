package membercluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.MemberCluster]{
	Columns: []metav1.TableColumnDefinition{
		common.Column("Reachable", "Whether the member's API server answered the last check, or why not."),
		common.Column("Ready", "Whether the member is collected from, or why not."),
		common.Column("Owner", "The kollect-apiserver replica collecting from the member."),
		common.Column("Version", "The member's Kubernetes version."),
		{Name: "Items", Type: "integer", Description: "How many items the hub holds from the member."},
	},
	Cells: func(m *kollect.MemberCluster) []any {
		owner, version, items := "<none>", "<unknown>", int64(0)
		if c := m.Status.Collection; c != nil {
			if c.Owner != "" {
				owner = c.Owner
			}
			if c.ServerVersion != "" {
				version = c.ServerVersion
			}
			items = c.ItemCount
		}
		return []any{common.ConditionStatus(m.Status.Conditions, kollect.ConditionReachable),
			common.ConditionStatus(m.Status.Conditions, kollect.ConditionReady), owner, version, items}
	},
}
