package validation

import (
	"context"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// testCA is a self-signed certificate for tls.caBundle.
const testCA = `-----BEGIN CERTIFICATE-----
MIIBfDCCASGgAwIBAgIUGKtOylHl9DyHBBobxD2su2skobQwCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdC1jYTAgFw0yNjExMjIwMzI4MTZaGA8yMTI2MTAyOTAz
MjgxNlowEjEQMA4GA1UEAwwHdGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEH
A0IABAYSM/TEOvTn5+QBGFHPMCk1pmAMXNJAcnIpE7f3T7TmJVUjdkn3GoxIejXK
TKwrI25qNl9dZyoydVKg2YcMahWjUzBRMB0GA1UdDgQWBBTIWwL84VhHdzI4PEgp
nH8R0bIV9DAfBgNVHSMEGDAWgBTIWwL84VhHdzI4PEgpnH8R0bIV9DAPBgNVHRMB
Af8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCctkaLUjCLgvy0SRf7dzJSM+yk
JL3otcmMSxmSuEYYKwIhAOZd7Zv6rsc/uw/EiTeFIDtCXtLB16MSGVTGXTbDe2t+
-----END CERTIFICATE-----
`

// testOptions resolve names with fakeLookup: tests never use DNS. File
// sinks and local git sinks are on, as on a server with --file-sink-root
// and --allow-local-git-sinks; sinks_test.go tries them off.
var testOptions = Options{LookupIP: fakeLookup, FileSinks: true, AllowLocalGitSinks: true}

func fakeLookup(_ context.Context, host string) ([]net.IP, error) {
	addrs := map[string]string{
		"git.example.com":          "203.0.113.10",
		"hooks.example.com":        "2001:db8::10",
		"db.example.com":           "198.51.100.7",
		"nats.example.com":         "198.51.100.8",
		"git.internal.example.com": "10.1.2.3",
		"cgnat.example.com":        "100.64.1.1",
		"imds.example.com":         "fd00:ec2::254",
	}
	if addr, ok := addrs[host]; ok {
		return []net.IP{net.ParseIP(addr)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func nsMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "team-a", ResourceVersion: "1"}
}

func clusterMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, ResourceVersion: "1"}
}

func validProfile() *kollect.Profile {
	return &kollect.Profile{
		ObjectMeta: nsMeta("deployments"),
		Spec: kollect.ProfileSpec{
			TargetGVK: kollect.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []kollect.Attribute{
				{Name: "image", Path: "{.spec.template.spec.containers[*].image}"},
				{Name: "replicas", Path: "cel:object.spec.replicas", Optional: true},
			},
			Export: kollect.ProfileExport{Mode: kollect.ExportModeAttributes},
		},
	}
}

func validResourceProfile() *kollect.Profile {
	p := validProfile()
	p.Spec.Attributes = nil
	yes := true
	p.Spec.Export = kollect.ProfileExport{
		Mode:    kollect.ExportModeResource,
		Include: kollect.IncludeSpecAndStatus,
		Prune: &kollect.ResourcePrune{
			ManagedFields: &yes, LastAppliedAnnotation: &yes,
			JSONPointers: []string{"/status/conditions", "/metadata/annotations/a~1b"},
			ScrubKeys:    []string{"password"},
		},
	}
	return p
}

func validSecretsProfile() *kollect.Profile {
	p := validProfile()
	p.Annotations = map[string]string{kollect.AnnotationCollectSecrets: "true"}
	p.Spec.TargetGVK = kollect.GroupVersionKind{Version: "v1", Kind: "Secret"}
	p.Spec.Attributes = []kollect.Attribute{{Name: "type", Path: "{.type}"}}
	return p
}

func validTarget() *kollect.Target {
	return &kollect.Target{
		ObjectMeta: nsMeta("web"),
		Spec: kollect.TargetSpec{
			ProfileRef:    kollect.LocalObjectReference{Name: "deployments"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Names:         []string{"web", "system:controller"},
		},
	}
}

func validClusterTarget() *kollect.ClusterTarget {
	return &kollect.ClusterTarget{
		ObjectMeta: clusterMeta("platform-deployments"),
		Spec: kollect.ClusterTargetSpec{
			ProfileRef:        kollect.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployment-baseline"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kollect.dev/collect": "true"}},
			IncludeNamespaces: []string{"team-a", "team-b"},
			ExcludeNamespaces: []string{"kube-system"},
		},
	}
}

func validInventory() *kollect.Inventory {
	return &kollect.Inventory{
		ObjectMeta: nsMeta("team-a"),
		Spec: kollect.InventorySpec{
			ExportMinInterval: dur(30 * time.Second),
			SnapshotSinkRefs:  []kollect.SinkReference{{Name: "audit", ExportMinInterval: dur(time.Hour)}},
			DatabaseSinkRefs:  []kollect.SinkReference{{Name: "portal"}},
			EventSinkRefs:     []kollect.SinkReference{{Name: "changes", ExportMinInterval: dur(0)}},
		},
	}
}

func validClusterInventory() *kollect.ClusterInventory {
	return &kollect.ClusterInventory{
		ObjectMeta: clusterMeta("platform-rollup"),
		Spec: kollect.ClusterInventorySpec{
			SinkNamespace:     "kollect-system",
			TargetRefs:        []kollect.LocalObjectReference{{Name: "platform-deployments"}},
			ExportMinInterval: dur(24 * time.Hour),
			SnapshotSinkRefs:  []kollect.SinkReference{{Name: "git-backup"}, {Name: "team-git", Namespace: "team-a"}},
		},
	}
}

// sinkRefs returns n references named prefix-0, prefix-1, ...
func sinkRefs(prefix string, n int) []kollect.SinkReference {
	refs := make([]kollect.SinkReference, n)
	for i := range refs {
		refs[i] = kollect.SinkReference{Name: prefix + "-" + strings.Repeat("x", i+1)}
	}
	return refs
}

func validGitSink() *kollect.SnapshotSink {
	return &kollect.SnapshotSink{
		ObjectMeta: nsMeta("audit"),
		Spec: kollect.SnapshotSinkSpec{
			Type:              kollect.SnapshotSinkGit,
			Endpoint:          "https://git.example.com/platform/inventory.git",
			SecretRef:         &kollect.LocalObjectReference{Name: "git-token"},
			TLS:               &kollect.TLSConfig{CABundle: []byte(testCA), ServerName: "git.example.com"},
			ExportMinInterval: dur(time.Hour),
			Serialization:     kollect.Serialization{Format: kollect.SerializationYAML},
			DeletionPolicy:    kollect.DeletionPolicyRetain,
			Git: &kollect.GitSinkConfig{
				Branch:        "main",
				PathTemplate:  "{cluster}/{namespace}/{inventory}.{ext}",
				CommitMessage: "kollect: {cluster}/{namespace}/{inventory} ({itemCount} items, {checksum})",
				AuthorName:    "Kollect",
				AuthorEmail:   "kollect@kollect.dev",
			},
		},
	}
}

func validFileSink() *kollect.SnapshotSink {
	return &kollect.SnapshotSink{
		ObjectMeta: nsMeta("local"),
		Spec: kollect.SnapshotSinkSpec{
			Type:           kollect.SnapshotSinkFile,
			Endpoint:       "file:///var/lib/kollect",
			Serialization:  kollect.Serialization{Format: kollect.SerializationJSON},
			DeletionPolicy: kollect.DeletionPolicyDelete,
			File:           &kollect.FileSinkConfig{PathTemplate: "{cluster}/{namespace}/{inventory}.{ext}"},
		},
	}
}

func validDatabaseSink() *kollect.DatabaseSink {
	return &kollect.DatabaseSink{
		ObjectMeta: nsMeta("portal"),
		Spec: kollect.DatabaseSinkSpec{
			Type:           kollect.DatabaseSinkPostgres,
			SecretRef:      &kollect.LocalObjectReference{Name: "portal-db"},
			DeletionPolicy: kollect.DeletionPolicyRetain,
			Postgres:       &kollect.PostgresSinkConfig{Schema: "public", Table: "kollect_inventory"},
		},
	}
}

func validNATSSink() *kollect.EventSink {
	return &kollect.EventSink{
		ObjectMeta: nsMeta("changes"),
		Spec: kollect.EventSinkSpec{
			Type:           kollect.EventSinkNATS,
			Endpoint:       "nats://nats.messaging:4222",
			DeletionPolicy: kollect.DeletionPolicyRetain,
			NATS:           &kollect.NATSSinkConfig{Stream: "kollect", Subject: "kollect.{cluster}.{namespace}.{inventory}"},
		},
	}
}

func validWebhookSink() *kollect.EventSink {
	return &kollect.EventSink{
		ObjectMeta: nsMeta("hooks"),
		Spec: kollect.EventSinkSpec{
			Type:           kollect.EventSinkWebhook,
			Endpoint:       "https://hooks.example.com/kollect",
			SecretRef:      &kollect.LocalObjectReference{Name: "hook-key"},
			DeletionPolicy: kollect.DeletionPolicyRetain,
			Webhook:        &kollect.WebhookSinkConfig{SignatureHeader: "X-Kollect-Signature", Timeout: dur(10 * time.Second), MaxAttempts: 5},
		},
	}
}

func validScope() *kollect.Scope {
	return &kollect.Scope{
		ObjectMeta: nsMeta("limits"),
		Spec: kollect.ScopeSpec{
			MinExportInterval: dur(time.Minute),
			AllowedGVKs:       []kollect.GroupKind{{Group: "apps", Kind: "Deployment"}, {Kind: "ConfigMap"}, {Group: "*", Kind: "*"}},
			SnapshotSinkRefs:  []string{"audit"},
			EventSinkRefs:     []string{"changes"},
			MaxTargets:        ptr.To[int32](20),
			MaxInventories:    ptr.To[int32](0),
			MaxSinks:          ptr.To[int32](10),
			MaxItems:          ptr.To[int64](5000),
			MaxItemBytes:      ptr.To(resource.MustParse("1.5Mi")),
		},
	}
}

func validClusterScope() *kollect.ClusterScope {
	return &kollect.ClusterScope{
		ObjectMeta: clusterMeta("platform"),
		Spec: kollect.ClusterScopeSpec{
			MinExportInterval:   dur(5 * time.Minute),
			AllowedGVKs:         []kollect.GroupKind{{Group: "apps", Kind: "*"}},
			AllowedNamespaces:   []string{"team-a", "team-b"},
			DeniedNamespaces:    []string{"kube-system"},
			ReferenceNamespaces: []string{"kollect-system"},
			SnapshotSinkRefs:    []string{"kollect-system/git-backup"},
			MaxTargets:          ptr.To[int32](5),
			MaxSinks:            ptr.To[int32](0),
			MaxItems:            ptr.To[int64](100000),
			MaxItemBytes:        ptr.To(resource.MustParse("64Ki")),
		},
	}
}

const testHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func validInventoryItem() *kollect.InventoryItem {
	return &kollect.InventoryItem{
		ObjectMeta: nsMeta("web-deployment"),
		Source: kollect.ItemSource{
			APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web",
			UID: "6f1c2a57-0000-4000-8000-000000000001", ResourceVersion: "42",
		},
		Attributes: map[string]kollect.Value{
			"image":    {Raw: []byte(`["nginx:1.27"]`)},
			"replicas": {Raw: []byte(`3`)},
			"absent":   {},
		},
		Hash: testHash,
	}
}

func validClusterInventoryItem() *kollect.ClusterInventoryItem {
	return &kollect.ClusterInventoryItem{
		ObjectMeta: clusterMeta("team-a.web-deployment"),
		Source: kollect.ItemSource{
			APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "settings",
			UID: "6f1c2a57-0000-4000-8000-000000000002",
		},
		Object: &kollect.Value{Raw: []byte(`{"data":{"a":"b"}}`)},
		Hash:   testHash,
	}
}

func readyCondition() metav1.Condition {
	return metav1.Condition{
		Type: kollect.ConditionReady, Status: metav1.ConditionTrue, Reason: kollect.ReasonExported,
		LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
	}
}

func validInventoryStatus() *kollect.InventoryStatus {
	return &kollect.InventoryStatus{
		ObservedGeneration: 3,
		Conditions:         []metav1.Condition{readyCondition()},
		SinkExports: []kollect.SinkExportStatus{
			{Family: kollect.SinkFamilySnapshot, Name: "audit", Outcome: kollect.OutcomeExported, ItemCount: 4, EffectiveInterval: dur(time.Hour)},
			{Family: kollect.SinkFamilyEvent, Name: "audit", Outcome: kollect.OutcomeFailed, Reason: kollect.ReasonSinkNotFound, Message: "not found"},
			{Family: kollect.SinkFamilyDatabase, Name: "portal"},
		},
		ItemCount:   4,
		SinksSynced: "1/3",
	}
}

func validMemberCluster() *kollect.MemberCluster {
	return &kollect.MemberCluster{
		ObjectMeta: clusterMeta("east"),
		Spec: kollect.MemberClusterSpec{
			KubeconfigSecretRef: kollect.SecretKeyReference{Namespace: "kollect-system", Name: "east-kubeconfig", Key: "kubeconfig"},
		},
	}
}

func validMemberClusterStatus() *kollect.MemberClusterStatus {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &kollect.MemberClusterStatus{
		ObservedGeneration: 1,
		Collection: &kollect.MemberObservation{ObservedGeneration: 1, Owner: "kollect-apiserver-0", ServerVersion: "v1.36.3",
			ItemCount: 12, UnreachableSince: &since, ErrorClass: "TLSError", LastError: "x509: certificate signed by unknown authority"},
	}
}
