package validation

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

var (
	memberCluster       = mutated(validMemberCluster, ValidateMemberCluster)
	memberClusterUpdate = updated(validMemberCluster, ValidateMemberClusterUpdate)
	memberClusterStatus = mutated(validMemberClusterStatus, func(s *kollect.MemberClusterStatus) field.ErrorList {
		return ValidateMemberClusterStatus(s, field.NewPath("status"))
	})
	clusterTargetStatus = mutated(func() *kollect.ClusterTargetStatus {
		return &kollect.ClusterTargetStatus{Clusters: []kollect.ClusterCollection{
			{Name: "east", Collection: kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 3}},
			{Name: "west", Collection: kollect.CollectionObservation{Reason: "Unreachable", LastError: "dial tcp: i/o timeout"}},
		}}
	}, func(s *kollect.ClusterTargetStatus) field.ErrorList {
		return ValidateClusterTargetStatus(s, field.NewPath("status"))
	})
)

// selectable makes the first n attributes of a Profile selectable, adding
// attributes as needed.
func selectable(n int) func(*kollect.Profile) {
	return func(p *kollect.Profile) {
		for i := len(p.Spec.Attributes); i < n; i++ {
			p.Spec.Attributes = append(p.Spec.Attributes, kollect.Attribute{Name: fmt.Sprintf("a%d", i), Path: "{.metadata.name}"})
		}
		for i := range n {
			p.Spec.Attributes[i].Selectable = true
		}
	}
}

func TestFleetValid(t *testing.T) {
	tests := map[string]func() field.ErrorList{
		"member cluster":        memberCluster(noChange),
		"member cluster update": memberClusterUpdate(func(m *kollect.MemberCluster) { m.Spec.Suspend = true }),
		"member cluster with a dotted key": memberCluster(func(m *kollect.MemberCluster) {
			m.Spec.KubeconfigSecretRef.Key = "east.kubeconfig_v2"
		}),
		"member cluster status":                  memberClusterStatus(noChange),
		"member cluster status without a report": memberClusterStatus(func(s *kollect.MemberClusterStatus) { s.Collection = nil }),
		"cluster target with a cluster selector": clusterTarget(func(t *kollect.ClusterTarget) {
			t.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}
		}),
		"cluster target selecting every member": clusterTarget(func(t *kollect.ClusterTarget) { t.Spec.ClusterSelector = &metav1.LabelSelector{} }),
		"cluster target status with members":    clusterTargetStatus(noChange),
		"profile with 8 selectable attributes":  profile(selectable(8)),
		"item with selectable scalars": inventoryItem(func(i *kollect.InventoryItem) {
			i.Source.Cluster = "east"
			i.Attributes["image"] = kollect.Value{Raw: []byte(`"nginx:1.27"`)}
			i.Attributes["ready"] = kollect.Value{Raw: []byte(`true`)}
			i.SelectableAttributes = []string{"image", "replicas", "ready"}
		}),
	}
	expectValid(t, tests)
}

func TestFleetInvalid(t *testing.T) {
	const (
		required  = field.ErrorTypeRequired
		invalid   = field.ErrorTypeInvalid
		duplicate = field.ErrorTypeDuplicate
		forbidden = field.ErrorTypeForbidden
		tooMany   = field.ErrorTypeTooMany
		tooLong   = field.ErrorTypeTooLong
	)
	tests := []invalidCase{
		// MemberCluster
		{"member cluster without a Secret", memberCluster(func(m *kollect.MemberCluster) { m.Spec.KubeconfigSecretRef = kollect.SecretKeyReference{} }),
			[]fieldErr{{"spec.kubeconfigSecretRef.key", required}, {"spec.kubeconfigSecretRef.name", required}, {"spec.kubeconfigSecretRef.namespace", required}}},
		{"member cluster with bad Secret reference", memberCluster(func(m *kollect.MemberCluster) {
			m.Spec.KubeconfigSecretRef = kollect.SecretKeyReference{Namespace: "kollect.system", Name: "East_Kubeconfig", Key: "a/b"}
		}), []fieldErr{{"spec.kubeconfigSecretRef.key", invalid}, {"spec.kubeconfigSecretRef.name", invalid}, {"spec.kubeconfigSecretRef.namespace", invalid}}},
		{"member cluster named as no label can be", memberCluster(func(m *kollect.MemberCluster) { m.Name = "east.eu" }),
			[]fieldErr{{"metadata.name", invalid}}},
		{"member cluster with a namespace", memberCluster(func(m *kollect.MemberCluster) { m.Namespace = "team-a" }),
			[]fieldErr{{"metadata.namespace", forbidden}}},
		{"member cluster update renaming it", memberClusterUpdate(func(m *kollect.MemberCluster) { m.Name = "west" }),
			[]fieldErr{{"metadata.name", invalid}}},
		{"member cluster status with bad report", memberClusterStatus(func(s *kollect.MemberClusterStatus) {
			c := s.Collection
			c.ObservedGeneration, c.ItemCount = -1, -2
			c.Owner, c.ServerVersion = strings.Repeat("o", 254), strings.Repeat("v", 65)
			c.ErrorClass, c.LastError = "tls error", strings.Repeat("e", 4097)
		}), []fieldErr{
			{"status.collection.errorClass", invalid}, {"status.collection.itemCount", invalid}, {"status.collection.lastError", tooLong},
			{"status.collection.observedGeneration", invalid}, {"status.collection.owner", tooLong}, {"status.collection.serverVersion", tooLong},
		}},
		{"member cluster reachable since it became unreachable", memberClusterStatus(func(s *kollect.MemberClusterStatus) { s.Collection.Reachable = true }),
			[]fieldErr{{"status.collection.unreachableSince", forbidden}}},

		// ClusterTarget
		{"cluster target with bad cluster selector", clusterTarget(func(t *kollect.ClusterTarget) {
			t.Spec.ClusterSelector = &metav1.LabelSelector{
				MatchLabels:      map[string]string{"region": "-eu-"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}},
			}
		}), []fieldErr{{"spec.clusterSelector.matchExpressions[0].operator", invalid}, {"spec.clusterSelector.matchLabels", invalid}}},
		{"cluster target with 101 cluster selector labels", clusterTarget(func(t *kollect.ClusterTarget) {
			t.Spec.ClusterSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for i := range 101 {
				t.Spec.ClusterSelector.MatchLabels[fmt.Sprintf("k%d", i)] = "v"
			}
		}), []fieldErr{{"spec.clusterSelector.matchLabels", tooMany}}},
		{"cluster target status with bad members", clusterTargetStatus(func(s *kollect.ClusterTargetStatus) {
			s.Clusters = append(s.Clusters, kollect.ClusterCollection{Name: "east"}, kollect.ClusterCollection{Name: "East.eu"},
				kollect.ClusterCollection{Collection: kollect.CollectionObservation{ItemCount: -1, Reason: "not camel"}})
		}), []fieldErr{{"status.clusters[2].name", duplicate}, {"status.clusters[3].name", invalid}, {"status.clusters[4].collection.itemCount", invalid},
			{"status.clusters[4].collection.reason", invalid}, {"status.clusters[4].name", required}}},

		// Profile
		{"profile with 9 selectable attributes", profile(selectable(9)),
			[]fieldErr{{"spec.attributes[8].selectable", forbidden}}},
		{"profile with a selectable attribute in Resource mode", resourceProfile(func(p *kollect.Profile) {
			p.Spec.Attributes = []kollect.Attribute{{Name: "image", Path: "{.spec.image}", Selectable: true}}
		}), []fieldErr{{"spec.attributes[0].selectable", forbidden}}},

		// Items
		{"item with bad cluster and selectable attributes", inventoryItem(func(i *kollect.InventoryItem) {
			i.Source.Cluster = "East.eu"
			i.SelectableAttributes = []string{"replicas", "replicas", "image", "absent", "missing"}
		}), []fieldErr{{"selectableAttributes[1]", duplicate}, {"selectableAttributes[2]", invalid}, {"selectableAttributes[3]", invalid},
			{"selectableAttributes[4]", invalid}, {"source.cluster", invalid}}},
		{"cluster item with 9 selectable attributes", clusterInventoryItem(func(i *kollect.ClusterInventoryItem) {
			i.SelectableAttributes = make([]string, 9)
		}), []fieldErr{{"selectableAttributes", tooMany}}},
	}
	expectErrors(t, tests)
}

// TestSelectableMessages: the rejections of selectable attributes say the
// limit and the mode.
func TestSelectableMessages(t *testing.T) {
	errs := profile(selectable(9))()
	if len(errs) != 1 || !strings.Contains(errs[0].Detail, "at most 8 attributes of a Profile may be selectable") {
		t.Errorf("9 selectable: %v", errs)
	}
	errs = resourceProfile(func(p *kollect.Profile) {
		p.Spec.Attributes = []kollect.Attribute{{Name: "image", Path: "{.spec.image}", Selectable: true}}
	})()
	if len(errs) != 1 || !strings.Contains(errs[0].Detail, "Attributes mode") {
		t.Errorf("Resource mode: %v", errs)
	}
}

func TestAttributeFieldValue(t *testing.T) {
	for raw, want := range map[string]string{
		`"nginx:1.27"`: "nginx:1.27", `"a\"b"`: `a"b`, `3`: "3", `-1.5e3`: "-1.5e3", ` true `: "true", `false`: "false",
		`null`: "<none>", `["a"]`: "<none>", `{"a":1}`: "<none>", ``: "<none>", `tru`: "<none>", `1 2`: "<none>",
	} {
		got, ok := kollect.AttributeFieldValue(kollect.Value{Raw: []byte(raw)})
		if !ok {
			got = "<none>"
		}
		if got != want {
			t.Errorf("%s: %q, want %q", raw, got, want)
		}
	}
}
