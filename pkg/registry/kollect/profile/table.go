package profile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"strings"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var table = common.Table[*kollect.Profile]{
	Columns: []metav1.TableColumnDefinition{
		common.Column("Kind", "The collected kind, as group/version/kind."),
		common.Column("Mode", "Attributes or Resource."),
		common.Column("Attributes", "The names of the extracted attributes."),
		common.Column("Ready", "Whether the kind resolves in the cluster, or why not."),
	},
	Cells: func(p *kollect.Profile) []any {
		names := make([]string, len(p.Spec.Attributes))
		for i, a := range p.Spec.Attributes {
			names[i] = a.Name
		}
		return []any{gvk(p.Spec.TargetGVK), string(p.Spec.Export.Mode), strings.Join(names, ","), common.ConditionStatus(p.Status.Conditions, kollect.ConditionReady)}
	},
}

func gvk(g kollect.GroupVersionKind) string {
	if g.Group == "" {
		return g.Version + "/" + g.Kind
	}
	return g.Group + "/" + g.Version + "/" + g.Kind
}
