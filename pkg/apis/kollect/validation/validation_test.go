package validation

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// fieldErr is what a case asserts of each error: where and what kind.
type fieldErr struct {
	path string
	typ  field.ErrorType
}

func (e fieldErr) String() string { return fmt.Sprintf("%s %s", e.path, e.typ) }

func fieldErrs(errs field.ErrorList) []fieldErr {
	out := make([]fieldErr, 0, len(errs))
	for _, e := range errs {
		out = append(out, fieldErr{e.Field, e.Type})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// mutated returns a validation of a valid object after mutate changed it.
func mutated[T any](valid func() *T, validate func(*T) field.ErrorList) func(func(*T)) func() field.ErrorList {
	return func(mutate func(*T)) func() field.ErrorList {
		return func() field.ErrorList {
			obj := valid()
			mutate(obj)
			return validate(obj)
		}
	}
}

// updated returns a validation of the update of a valid object by mutate.
func updated[T any](valid func() *T, validate func(obj, old *T) field.ErrorList) func(func(*T)) func() field.ErrorList {
	return func(mutate func(*T)) func() field.ErrorList {
		return func() field.ErrorList {
			obj, old := valid(), valid()
			mutate(obj)
			return validate(obj, old)
		}
	}
}

func withOptions[T any](validate func(*T, Options) field.ErrorList, opts Options) func(*T) field.ErrorList {
	return func(obj *T) field.ErrorList { return validate(obj, opts) }
}

func withUpdateOptions[T any](validate func(obj, old *T, opts Options) field.ErrorList, opts Options) func(obj, old *T) field.ErrorList {
	return func(obj, old *T) field.ErrorList { return validate(obj, old, opts) }
}

var (
	profile                    = mutated(validProfile, ValidateProfile)
	resourceProfile            = mutated(validResourceProfile, ValidateProfile)
	secretsProfile             = mutated(validSecretsProfile, ValidateProfile)
	profileUpdate              = updated(validProfile, ValidateProfileUpdate)
	target                     = mutated(validTarget, ValidateTarget)
	clusterTarget              = mutated(validClusterTarget, ValidateClusterTarget)
	inventory                  = mutated(validInventory, ValidateInventory)
	clusterInventory           = mutated(validClusterInventory, ValidateClusterInventory)
	gitSink                    = mutated(validGitSink, withOptions(ValidateSnapshotSink, testOptions))
	gitSinkAllowingPrivate     = mutated(validGitSink, withOptions(ValidateSnapshotSink, Options{AllowPrivateSinkEndpoints: true, LookupIP: fakeLookup}))
	fileSink                   = mutated(validFileSink, withOptions(ValidateSnapshotSink, testOptions))
	fileSinkUpdate             = updated(validFileSink, withUpdateOptions(ValidateSnapshotSinkUpdate, testOptions))
	databaseSink               = mutated(validDatabaseSink, withOptions(ValidateDatabaseSink, testOptions))
	natsSink                   = mutated(validNATSSink, withOptions(ValidateEventSink, testOptions))
	natsSinkUpdate             = updated(validNATSSink, withUpdateOptions(ValidateEventSinkUpdate, testOptions))
	webhookSink                = mutated(validWebhookSink, withOptions(ValidateEventSink, testOptions))
	scope                      = mutated(validScope, ValidateScope)
	clusterScope               = mutated(validClusterScope, ValidateClusterScope)
	inventoryItem              = mutated(validInventoryItem, ValidateInventoryItem)
	inventoryItemUpdate        = updated(validInventoryItem, ValidateInventoryItemUpdate)
	clusterInventoryItem       = mutated(validClusterInventoryItem, ValidateClusterInventoryItem)
	clusterInventoryItemUpdate = updated(validClusterInventoryItem, ValidateClusterInventoryItemUpdate)
	inventoryStatus            = mutated(validInventoryStatus, func(s *kollect.InventoryStatus) field.ErrorList {
		return ValidateInventoryStatus(s, field.NewPath("status"))
	})
)

func noChange[T any](*T) {}

func TestValid(t *testing.T) {
	// A sink whose endpoint resolves to a private address, updated without
	// changing the endpoint: admitted before, it stays editable.
	privateGitUpdate := func() field.ErrorList {
		obj, old := validGitSink(), validGitSink()
		obj.Spec.Endpoint = "https://git.internal.example.com/inventory.git"
		old.Spec.Endpoint = obj.Spec.Endpoint
		obj.Labels = map[string]string{"edited": "true"}
		return ValidateSnapshotSinkUpdate(obj, old, testOptions)
	}
	tests := map[string]func() field.ErrorList{
		"profile":                 profile(noChange),
		"resource profile":        resourceProfile(noChange),
		"secrets profile":         secretsProfile(noChange),
		"profile update":          profileUpdate(func(p *kollect.Profile) { p.Spec.Attributes = p.Spec.Attributes[:1] }),
		"target":                  target(noChange),
		"target without selector": target(func(t *kollect.Target) { t.Spec.LabelSelector, t.Spec.Names = nil, nil }),
		"target with a selector at the limits": target(func(t *kollect.Target) {
			sel := &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for i := range 100 {
				sel.MatchLabels[fmt.Sprintf("k%d", i)] = "v"
				sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: fmt.Sprintf("e%d", i), Operator: metav1.LabelSelectorOpExists})
			}
			in := metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn}
			for i := range 1000 {
				in.Values = append(in.Values, fmt.Sprintf("v%d", i))
			}
			sel.MatchExpressions[0] = in
			t.Spec.LabelSelector = sel
		}),
		"cluster target": clusterTarget(noChange),
		"inventory":      inventory(noChange),
		"inventory with 20 refs": inventory(func(i *kollect.Inventory) {
			i.Spec.SnapshotSinkRefs, i.Spec.DatabaseSinkRefs, i.Spec.EventSinkRefs = sinkRefs("s", 10), sinkRefs("d", 5), sinkRefs("e", 5)
		}),
		"cluster inventory":      clusterInventory(noChange),
		"git sink":               gitSink(noChange),
		"git sink over ssh":      gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "ssh://git@git.example.com:2222/org/inventory.git" }),
		"git sink on local repo": gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "file:///srv/git/inventory.git" }),
		"git sink on an unresolvable host": gitSink(func(s *kollect.SnapshotSink) {
			s.Spec.Endpoint = "https://git.unknown.example.org/inventory.git"
		}),
		"private git sink allowed by the option": gitSinkAllowingPrivate(func(s *kollect.SnapshotSink) {
			s.Spec.Endpoint = "https://git.internal.example.com/inventory.git"
		}),
		"loopback git sink allowed by the option":          gitSinkAllowingPrivate(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "http://127.0.0.1:3000/repo.git" }),
		"private git sink updated without endpoint change": privateGitUpdate,
		"file sink":     fileSink(noChange),
		"database sink": databaseSink(noChange),
		"database sink with endpoint": databaseSink(func(s *kollect.DatabaseSink) {
			s.Spec.Endpoint, s.Spec.SecretRef = "postgresql://kollect@db.example.com:5432/inventory?sslmode=verify-full", nil
		}),
		"nats sink":              natsSink(noChange),
		"nats sink over tls":     natsSink(func(s *kollect.EventSink) { s.Spec.Endpoint = "tls://nats.example.com:4443" }),
		"webhook sink":           webhookSink(noChange),
		"scope":                  scope(noChange),
		"cluster scope":          clusterScope(noChange),
		"inventory item":         inventoryItem(noChange),
		"inventory item update":  inventoryItemUpdate(func(i *kollect.InventoryItem) { i.Source.ResourceVersion = "43" }),
		"cluster inventory item": clusterInventoryItem(noChange),
		"inventory status":       inventoryStatus(noChange),
		"target status": func() field.ErrorList {
			return ValidateTargetStatus(&kollect.TargetStatus{
				ObservedGeneration: 2, Conditions: []metav1.Condition{readyCondition()},
				Collection: &kollect.CollectionObservation{ItemCount: 3, Reason: kollect.ReasonKindNotFound},
			}, field.NewPath("status"))
		},
		"sink status": func() field.ErrorList {
			return ValidateSinkStatus(&kollect.SinkStatus{Probe: &kollect.ProbeResult{Succeeded: true, LatencyMillis: 12}}, field.NewPath("status"))
		},
	}
	expectValid(t, tests)
}

// expectValid runs each validation and wants no error.
func expectValid(t *testing.T, tests map[string]func() field.ErrorList) {
	t.Helper()
	for name, validate := range tests {
		t.Run(name, func(t *testing.T) {
			if errs := validate(); len(errs) > 0 {
				t.Errorf("unexpected errors: %v", errs)
			}
		})
	}
}

type invalidCase struct {
	name     string
	validate func() field.ErrorList
	want     []fieldErr
}

func TestInvalid(t *testing.T) {
	const (
		required     = field.ErrorTypeRequired
		invalid      = field.ErrorTypeInvalid
		notSupported = field.ErrorTypeNotSupported
		duplicate    = field.ErrorTypeDuplicate
		forbidden    = field.ErrorTypeForbidden
		tooMany      = field.ErrorTypeTooMany
		tooLong      = field.ErrorTypeTooLong
	)
	tests := []invalidCase{
		// Profile
		{"profile without namespace", profile(func(p *kollect.Profile) { p.Namespace = "" }),
			[]fieldErr{{"metadata.namespace", required}}},
		{"profile without version and kind", profile(func(p *kollect.Profile) { p.Spec.TargetGVK = kollect.GroupVersionKind{Group: "apps"} }),
			[]fieldErr{{"spec.targetGVK.kind", required}, {"spec.targetGVK.version", required}}},
		{"profile with bad group, version and kind", profile(func(p *kollect.Profile) {
			p.Spec.TargetGVK = kollect.GroupVersionKind{Group: "Apps_", Version: "V1", Kind: "deployment"}
		}), []fieldErr{{"spec.targetGVK.group", invalid}, {"spec.targetGVK.kind", invalid}, {"spec.targetGVK.version", invalid}}},
		{"profile with duplicate attribute", profile(func(p *kollect.Profile) { p.Spec.Attributes[1].Name = "image" }),
			[]fieldErr{{"spec.attributes[1].name", duplicate}}},
		{"profile with bad attribute name", profile(func(p *kollect.Profile) { p.Spec.Attributes[0].Name = "1image" }),
			[]fieldErr{{"spec.attributes[0].name", invalid}}},
		{"profile with empty attribute", profile(func(p *kollect.Profile) { p.Spec.Attributes[0] = kollect.Attribute{} }),
			[]fieldErr{{"spec.attributes[0].name", required}, {"spec.attributes[0].path", required}}},
		{"profile with bad JSONPath", profile(func(p *kollect.Profile) { p.Spec.Attributes[0].Path = "{.spec.containers[}" }),
			[]fieldErr{{"spec.attributes[0].path", invalid}}},
		{"profile with JSONPath without braces", profile(func(p *kollect.Profile) { p.Spec.Attributes[0].Path = ".spec.replicas" }),
			[]fieldErr{{"spec.attributes[0].path", invalid}}},
		{"profile with CEL that does not compile", profile(func(p *kollect.Profile) { p.Spec.Attributes[1].Path = "cel:object.spec.replicas +" }),
			[]fieldErr{{"spec.attributes[1].path", invalid}}},
		{"profile with CEL over budget", profile(func(p *kollect.Profile) {
			p.Spec.Attributes[1].Path = "cel:object.spec.containers.map(a, object.spec.containers.map(b, object.spec.containers.map(c, a.name + b.name + c.name)))"
		}), []fieldErr{{"spec.attributes[1].path", invalid}}},
		{"profile with too long path", profile(func(p *kollect.Profile) { p.Spec.Attributes[0].Path = "{.a" + strings.Repeat(".b", 2048) + "}" }),
			[]fieldErr{{"spec.attributes[0].path", tooLong}}},
		{"profile with 65 attributes", profile(func(p *kollect.Profile) {
			p.Spec.Attributes = nil
			for i := 0; i < 65; i++ {
				p.Spec.Attributes = append(p.Spec.Attributes, kollect.Attribute{Name: fmt.Sprintf("a%d", i), Path: "{.metadata.name}"})
			}
		}), []fieldErr{{"spec.attributes", tooMany}}},
		{"profile in Attributes mode without attributes", profile(func(p *kollect.Profile) { p.Spec.Attributes = nil }),
			[]fieldErr{{"spec.attributes", required}}},
		{"profile with unknown mode", profile(func(p *kollect.Profile) { p.Spec.Export.Mode = "Everything" }),
			[]fieldErr{{"spec.export.mode", notSupported}}},
		{"profile with unknown include", resourceProfile(func(p *kollect.Profile) { p.Spec.Export.Include = "Most" }),
			[]fieldErr{{"spec.export.include", notSupported}}},
		{"profile with bad JSON pointers", resourceProfile(func(p *kollect.Profile) {
			p.Spec.Export.Prune.JSONPointers = []string{"status", "/a~2", "/ok", "/ok"}
		}), []fieldErr{{"spec.export.prune.jsonPointers[0]", invalid}, {"spec.export.prune.jsonPointers[1]", invalid}, {"spec.export.prune.jsonPointers[3]", duplicate}}},
		{"profile with bad scrub keys", resourceProfile(func(p *kollect.Profile) {
			p.Spec.Export.Prune.ScrubKeys = make([]string, 65)
			for i := range p.Spec.Export.Prune.ScrubKeys {
				p.Spec.Export.Prune.ScrubKeys[i] = fmt.Sprintf("k%d", i)
			}
			p.Spec.Export.Prune.ScrubKeys[0] = ""
		}), []fieldErr{{"spec.export.prune.scrubKeys", tooMany}, {"spec.export.prune.scrubKeys[0]", required}}},
		{"Secrets profile without opt-in", secretsProfile(func(p *kollect.Profile) { p.Annotations = nil }),
			[]fieldErr{{"metadata.annotations[kollect.dev/collect-secrets]", required}}},
		{"Secrets profile with opt-in not true", secretsProfile(func(p *kollect.Profile) { p.Annotations[kollect.AnnotationCollectSecrets] = "yes" }),
			[]fieldErr{{"metadata.annotations[kollect.dev/collect-secrets]", invalid}}},
		{"profile update changing targetGVK", profileUpdate(func(p *kollect.Profile) { p.Spec.TargetGVK.Kind = "StatefulSet" }),
			[]fieldErr{{"spec.targetGVK", invalid}}},
		{"profile update changing name", profileUpdate(func(p *kollect.Profile) { p.Name = "other" }),
			[]fieldErr{{"metadata.name", invalid}}},

		// Target
		{"target without profile", target(func(t *kollect.Target) { t.Spec.ProfileRef.Name = "" }),
			[]fieldErr{{"spec.profileRef.name", required}}},
		{"target with bad profile name", target(func(t *kollect.Target) { t.Spec.ProfileRef.Name = "Deployments" }),
			[]fieldErr{{"spec.profileRef.name", invalid}}},
		{"target with bad selector", target(func(t *kollect.Target) {
			t.Spec.LabelSelector = &metav1.LabelSelector{
				MatchLabels:      map[string]string{"app": "-web-"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}},
			}
		}), []fieldErr{{"spec.labelSelector.matchExpressions[0].values", required}, {"spec.labelSelector.matchLabels", invalid}}},
		{"target with bad and duplicate names", target(func(t *kollect.Target) { t.Spec.Names = []string{"web", "web", "a/b", ".."} }),
			[]fieldErr{{"spec.names[1]", duplicate}, {"spec.names[2]", invalid}, {"spec.names[3]", invalid}}},
		{"target with 1001 names", target(func(t *kollect.Target) {
			t.Spec.Names = make([]string, 1001)
			for i := range t.Spec.Names {
				t.Spec.Names[i] = fmt.Sprintf("n%d", i)
			}
		}), []fieldErr{{"spec.names", tooMany}}},
		{"target with 10,000 matchLabels", target(func(t *kollect.Target) {
			t.Spec.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for i := range 10000 {
				t.Spec.LabelSelector.MatchLabels[fmt.Sprintf("k%d", i)] = "v"
			}
		}), []fieldErr{{"spec.labelSelector.matchLabels", tooMany}}},
		{"target with 10,000 values in a selector expression", target(func(t *kollect.Target) {
			req := metav1.LabelSelectorRequirement{Key: "app", Operator: metav1.LabelSelectorOpIn}
			for i := range 10000 {
				req.Values = append(req.Values, fmt.Sprintf("v%d", i))
			}
			t.Spec.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}, req}}
		}), []fieldErr{{"spec.labelSelector.matchExpressions[1].values", tooMany}}},
		{"target with 101 selector expressions", target(func(t *kollect.Target) {
			t.Spec.LabelSelector = &metav1.LabelSelector{}
			for i := range 101 {
				t.Spec.LabelSelector.MatchExpressions = append(t.Spec.LabelSelector.MatchExpressions,
					metav1.LabelSelectorRequirement{Key: fmt.Sprintf("k%d", i), Operator: metav1.LabelSelectorOpExists})
			}
		}), []fieldErr{{"spec.labelSelector.matchExpressions", tooMany}}},

		// ClusterTarget
		{"cluster target without profileRef.namespace", clusterTarget(func(t *kollect.ClusterTarget) { t.Spec.ProfileRef.Namespace = "" }),
			[]fieldErr{{"spec.profileRef.namespace", required}}},
		{"cluster target with a namespace of its own", clusterTarget(func(t *kollect.ClusterTarget) { t.Namespace = "team-a" }),
			[]fieldErr{{"metadata.namespace", forbidden}}},
		{"cluster target with bad namespaces", clusterTarget(func(t *kollect.ClusterTarget) {
			t.Spec.ProfileRef.Namespace = "Kollect-System"
			t.Spec.IncludeNamespaces = []string{"team-a", "team-a", "team.b"}
			t.Spec.ExcludeNamespaces = []string{""}
		}), []fieldErr{{"spec.excludeNamespaces[0]", required}, {"spec.includeNamespaces[1]", duplicate}, {"spec.includeNamespaces[2]", invalid}, {"spec.profileRef.namespace", invalid}}},
		{"cluster target with bad namespace selector", clusterTarget(func(t *kollect.ClusterTarget) {
			t.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}
		}), []fieldErr{{"spec.namespaceSelector.matchExpressions[0].operator", invalid}}},

		// Inventory
		{"inventory with exportMinInterval 25h", inventory(func(i *kollect.Inventory) { i.Spec.ExportMinInterval = dur(25 * time.Hour) }),
			[]fieldErr{{"spec.exportMinInterval", invalid}}},
		{"inventory with negative ref interval", inventory(func(i *kollect.Inventory) { i.Spec.SnapshotSinkRefs[0].ExportMinInterval = dur(-time.Second) }),
			[]fieldErr{{"spec.snapshotSinkRefs[0].exportMinInterval", invalid}}},
		{"inventory with 21 sink refs", inventory(func(i *kollect.Inventory) {
			i.Spec.SnapshotSinkRefs, i.Spec.DatabaseSinkRefs, i.Spec.EventSinkRefs = sinkRefs("s", 8), sinkRefs("d", 8), sinkRefs("e", 5)
		}), []fieldErr{{"spec.eventSinkRefs", tooMany}}},
		{"inventory with 25 snapshot sink refs", inventory(func(i *kollect.Inventory) { i.Spec.SnapshotSinkRefs = sinkRefs("s", 25) }),
			[]fieldErr{{"spec.snapshotSinkRefs", tooMany}}},
		{"inventory with duplicate ref", inventory(func(i *kollect.Inventory) {
			i.Spec.DatabaseSinkRefs = append(i.Spec.DatabaseSinkRefs, kollect.SinkReference{Name: "portal"})
		}), []fieldErr{{"spec.databaseSinkRefs[1].name", duplicate}}},
		{"inventory with namespace on a ref", inventory(func(i *kollect.Inventory) { i.Spec.EventSinkRefs[0].Namespace = "team-b" }),
			[]fieldErr{{"spec.eventSinkRefs[0].namespace", forbidden}}},
		{"inventory with bad ref names", inventory(func(i *kollect.Inventory) {
			i.Spec.SnapshotSinkRefs = []kollect.SinkReference{{}, {Name: "Audit"}}
		}), []fieldErr{{"spec.snapshotSinkRefs[0].name", required}, {"spec.snapshotSinkRefs[1].name", invalid}}},
		{"inventory with bad target selector", inventory(func(i *kollect.Inventory) {
			i.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key": "x"}}
		}), []fieldErr{{"spec.targetSelector.matchLabels", invalid}}},

		// ClusterInventory
		{"cluster inventory without sinkNamespace", clusterInventory(func(i *kollect.ClusterInventory) { i.Spec.SinkNamespace = "" }),
			[]fieldErr{{"spec.sinkNamespace", required}}},
		{"cluster inventory with bad refs", clusterInventory(func(i *kollect.ClusterInventory) {
			i.Spec.SnapshotSinkRefs[1].Namespace = "Team_A"
			i.Spec.TargetRefs = append(i.Spec.TargetRefs, i.Spec.TargetRefs[0])
			i.Spec.ExportMinInterval = dur(24*time.Hour + time.Second)
		}), []fieldErr{{"spec.exportMinInterval", invalid}, {"spec.snapshotSinkRefs[1].namespace", invalid}, {"spec.targetRefs[1].name", duplicate}}},
		{"cluster inventory with 1001 target refs", clusterInventory(func(i *kollect.ClusterInventory) {
			i.Spec.TargetRefs = nil
			for n := range 1001 {
				i.Spec.TargetRefs = append(i.Spec.TargetRefs, kollect.LocalObjectReference{Name: fmt.Sprintf("t%d", n)})
			}
		}), []fieldErr{{"spec.targetRefs", tooMany}}},
		{"cluster inventory with 10,000 matchLabels in its target selector", clusterInventory(func(i *kollect.ClusterInventory) {
			i.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for n := range 10000 {
				i.Spec.TargetSelector.MatchLabels[fmt.Sprintf("k%d", n)] = "v"
			}
		}), []fieldErr{{"spec.targetSelector.matchLabels", tooMany}}},
		{"cluster inventory with 21 sink refs", clusterInventory(func(i *kollect.ClusterInventory) {
			i.Spec.SnapshotSinkRefs, i.Spec.DatabaseSinkRefs = sinkRefs("s", 2), sinkRefs("d", 19)
		}), []fieldErr{{"spec.databaseSinkRefs", tooMany}}},

		// SnapshotSink
		{"sink with unknown type", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Type = "s3" }),
			[]fieldErr{{"spec.type", notSupported}}},
		{"file sink with https endpoint", fileSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://example.com/dir" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"file sink with relative endpoint", fileSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "file://var/lib/kollect" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"file sink with .. in endpoint", fileSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "file:///var/lib/../../etc" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"file sink without endpoint", fileSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "" }),
			[]fieldErr{{"spec.endpoint", required}}},
		{"file sink with git block", fileSink(func(s *kollect.SnapshotSink) { s.Spec.Git = validGitSink().Spec.Git }),
			[]fieldErr{{"spec.git", forbidden}}},
		{"file sink with bad path templates", fileSink(func(s *kollect.SnapshotSink) { s.Spec.File.PathTemplate = "../{namespace}.{ext}" }),
			[]fieldErr{{"spec.file.pathTemplate", invalid}}},
		{"file sink with unknown placeholder", fileSink(func(s *kollect.SnapshotSink) { s.Spec.File.PathTemplate = "{region}/{inventory}.{ext}" }),
			[]fieldErr{{"spec.file.pathTemplate", invalid}}},
		{"git sink without git block", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Git = nil }),
			[]fieldErr{{"spec.git", required}}},
		{"git sink with password in URL", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://bot:s3cret@git.example.com/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink with user over http", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "http://bot@git.example.com/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink with scp-like endpoint", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "git@git.example.com:org/inventory.git" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"git sink resolving to a private address", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://git.internal.example.com/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on a private IP", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://192.168.1.10/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on the metadata address", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "http://169.254.169.254/latest/meta-data" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on the metadata host", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "http://metadata.google.internal/computeMetadata/v1" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on localhost", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://repo.localhost/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on mapped loopback", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://[::ffff:127.0.0.1]/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on a CGNAT host", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "ssh://git@cgnat.example.com/inventory.git" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"git sink on a numeric host", gitSink(func(s *kollect.SnapshotSink) { s.Spec.Endpoint = "https://2130706433/inventory.git" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"git sink with bad git config", gitSink(func(s *kollect.SnapshotSink) {
			s.Spec.Git.Branch = "feature..x"
			s.Spec.Git.CommitMessage = "sync {namespace} by {user}"
			s.Spec.Git.AuthorEmail = "not an email"
			s.Spec.Git.AuthorName = ""
		}), []fieldErr{{"spec.git.authorEmail", invalid}, {"spec.git.authorName", required}, {"spec.git.branch", invalid}, {"spec.git.commitMessage", invalid}}},
		{"git sink with bad common fields", gitSink(func(s *kollect.SnapshotSink) {
			s.Spec.Serialization.Format = "xml"
			s.Spec.DeletionPolicy = ""
			s.Spec.ExportMinInterval = dur(48 * time.Hour)
			s.Spec.SecretRef.Name = ""
			s.Spec.TLS.CABundle = []byte("not a certificate")
		}), []fieldErr{{"spec.deletionPolicy", required}, {"spec.exportMinInterval", invalid}, {"spec.secretRef.name", required}, {"spec.serialization.format", notSupported}, {"spec.tls.caBundle", invalid}}},
		{"file sink update changing type", fileSinkUpdate(func(s *kollect.SnapshotSink) {
			git := validGitSink()
			s.Spec.Type, s.Spec.Endpoint, s.Spec.Git, s.Spec.File = git.Spec.Type, git.Spec.Endpoint, git.Spec.Git, nil
		}), []fieldErr{{"spec.type", invalid}}},

		// DatabaseSink
		{"database sink without endpoint or secret", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.SecretRef = nil }),
			[]fieldErr{{"spec.secretRef", required}}},
		{"database sink with password in URL", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.Endpoint = "postgres://kollect:hunter2@db.example.com/inventory" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"database sink with password parameter", databaseSink(func(s *kollect.DatabaseSink) {
			s.Spec.Endpoint = "postgres://db.example.com/inventory?password=hunter2"
		}),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"database sink with private host parameter", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.Endpoint = "postgres://db.example.com/inventory?host=10.0.0.5" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"database sink with mysql endpoint", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.Endpoint = "mysql://db.example.com/inventory" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"database sink with bad identifiers", databaseSink(func(s *kollect.DatabaseSink) {
			s.Spec.Postgres = &kollect.PostgresSinkConfig{Schema: "", Table: "inventory; drop table users"}
		}), []fieldErr{{"spec.postgres.schema", required}, {"spec.postgres.table", invalid}}},
		{"database sink without postgres block", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.Postgres = nil }),
			[]fieldErr{{"spec.postgres", required}}},
		{"database sink with unknown type", databaseSink(func(s *kollect.DatabaseSink) { s.Spec.Type = "" }),
			[]fieldErr{{"spec.type", required}}},

		// EventSink
		{"nats sink without port", natsSink(func(s *kollect.EventSink) { s.Spec.Endpoint = "nats://nats.example.com" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"nats sink with https endpoint", natsSink(func(s *kollect.EventSink) { s.Spec.Endpoint = "https://nats.example.com:4222" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"nats sink without nats block", natsSink(func(s *kollect.EventSink) { s.Spec.NATS = nil }),
			[]fieldErr{{"spec.nats", required}}},
		{"nats sink with bad stream and subject", natsSink(func(s *kollect.EventSink) {
			s.Spec.NATS = &kollect.NATSSinkConfig{Stream: "kollect.events", Subject: "kollect.*.{namespace}"}
		}), []fieldErr{{"spec.nats.stream", invalid}, {"spec.nats.subject", invalid}}},
		{"nats sink with empty subject token", natsSink(func(s *kollect.EventSink) { s.Spec.NATS.Subject = "kollect..{name}" }),
			[]fieldErr{{"spec.nats.subject", invalid}}},
		{"nats sink with webhook block", natsSink(func(s *kollect.EventSink) { s.Spec.Webhook = validWebhookSink().Spec.Webhook }),
			[]fieldErr{{"spec.webhook", forbidden}}},
		{"webhook sink with nats block", webhookSink(func(s *kollect.EventSink) { s.Spec.NATS = validNATSSink().Spec.NATS }),
			[]fieldErr{{"spec.nats", forbidden}}},
		{"webhook sink with bad delivery settings", webhookSink(func(s *kollect.EventSink) {
			s.Spec.Webhook = &kollect.WebhookSinkConfig{SignatureHeader: "X Signature", Timeout: dur(2 * time.Minute), MaxAttempts: 21}
		}), []fieldErr{{"spec.webhook.maxAttempts", invalid}, {"spec.webhook.signatureHeader", invalid}, {"spec.webhook.timeout", invalid}}},
		{"webhook sink with ftp endpoint", webhookSink(func(s *kollect.EventSink) { s.Spec.Endpoint = "ftp://hooks.example.com/in" }),
			[]fieldErr{{"spec.endpoint", invalid}}},
		{"webhook sink resolving to the IPv6 metadata address", webhookSink(func(s *kollect.EventSink) { s.Spec.Endpoint = "https://imds.example.com/hook" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},
		{"event sink update changing type", natsSinkUpdate(func(s *kollect.EventSink) {
			hook := validWebhookSink()
			s.Spec.Type, s.Spec.Endpoint, s.Spec.Webhook, s.Spec.NATS = hook.Spec.Type, hook.Spec.Endpoint, hook.Spec.Webhook, nil
		}), []fieldErr{{"spec.type", invalid}}},
		{"event sink update to a private endpoint", natsSinkUpdate(func(s *kollect.EventSink) { s.Spec.Endpoint = "nats://10.0.0.9:4222" }),
			[]fieldErr{{"spec.endpoint", forbidden}}},

		// Scope
		{"scope with bad kinds", scope(func(s *kollect.Scope) {
			s.Spec.AllowedGVKs = []kollect.GroupKind{{Group: "apps"}, {Group: "x_y", Kind: "Deployment"}}
		}), []fieldErr{{"spec.allowedGVKs[0].kind", required}, {"spec.allowedGVKs[1].group", invalid}}},
		{"scope with 101 kinds", scope(func(s *kollect.Scope) {
			s.Spec.AllowedGVKs = make([]kollect.GroupKind, 101)
			for i := range s.Spec.AllowedGVKs {
				s.Spec.AllowedGVKs[i] = kollect.GroupKind{Kind: "*"}
			}
		}), []fieldErr{{"spec.allowedGVKs", tooMany}}},
		{"scope with bad sink allowlists", scope(func(s *kollect.Scope) {
			s.Spec.SnapshotSinkRefs = []string{"audit", "audit"}
			s.Spec.DatabaseSinkRefs = []string{"Portal"}
			s.Spec.MinExportInterval = dur(-time.Minute)
		}), []fieldErr{{"spec.databaseSinkRefs[0]", invalid}, {"spec.minExportInterval", invalid}, {"spec.snapshotSinkRefs[1]", duplicate}}},
		{"scope with negative quotas", scope(func(s *kollect.Scope) {
			s.Spec.MaxTargets, s.Spec.MaxInventories, s.Spec.MaxSinks = ptr.To[int32](-1), ptr.To[int32](-2), ptr.To[int32](math.MinInt32)
			s.Spec.MaxItems, s.Spec.MaxItemBytes = ptr.To[int64](-1), ptr.To(resource.MustParse("-1"))
		}), []fieldErr{{"spec.maxInventories", invalid}, {"spec.maxItemBytes", invalid}, {"spec.maxItems", invalid}, {"spec.maxSinks", invalid}, {"spec.maxTargets", invalid}}},
		{"scope with maxItemBytes over etcd's limit", scope(func(s *kollect.Scope) { s.Spec.MaxItemBytes = ptr.To(resource.MustParse("1572865")) }),
			[]fieldErr{{"spec.maxItemBytes", invalid}}},
		{"scope with a huge maxItemBytes", scope(func(s *kollect.Scope) { s.Spec.MaxItemBytes = ptr.To(resource.MustParse("9Ei")) }),
			[]fieldErr{{"spec.maxItemBytes", invalid}}},
		{"scope with a fractional maxItemBytes", scope(func(s *kollect.Scope) { s.Spec.MaxItemBytes = ptr.To(resource.MustParse("1500m")) }),
			[]fieldErr{{"spec.maxItemBytes", invalid}}},

		// ClusterScope
		{"cluster scope allowing and denying a namespace", clusterScope(func(s *kollect.ClusterScope) { s.Spec.DeniedNamespaces = []string{"team-b"} }),
			[]fieldErr{{"spec.deniedNamespaces[0]", invalid}}},
		{"cluster scope with bad sink refs", clusterScope(func(s *kollect.ClusterScope) {
			s.Spec.SnapshotSinkRefs = []string{"git-backup", "Team/x", "team-a/ok", "team-a/ok"}
		}), []fieldErr{{"spec.snapshotSinkRefs[0]", invalid}, {"spec.snapshotSinkRefs[1]", invalid}, {"spec.snapshotSinkRefs[3]", duplicate}}},
		{"cluster scope with bad reference namespaces", clusterScope(func(s *kollect.ClusterScope) {
			s.Spec.ReferenceNamespaces = []string{"kollect-system", "kollect_system"}
		}), []fieldErr{{"spec.referenceNamespaces[1]", invalid}}},
		{"cluster scope with negative quotas", clusterScope(func(s *kollect.ClusterScope) {
			s.Spec.MaxTargets, s.Spec.MaxInventories, s.Spec.MaxSinks = ptr.To[int32](-1), ptr.To[int32](-1), ptr.To[int32](-1)
			s.Spec.MaxItems, s.Spec.MaxItemBytes = ptr.To[int64](math.MinInt64), ptr.To(resource.MustParse("2Mi"))
		}), []fieldErr{{"spec.maxInventories", invalid}, {"spec.maxItemBytes", invalid}, {"spec.maxItems", invalid}, {"spec.maxSinks", invalid}, {"spec.maxTargets", invalid}}},

		// InventoryItem
		{"item without source", inventoryItem(func(i *kollect.InventoryItem) { i.Source = kollect.ItemSource{} }),
			[]fieldErr{{"source.apiVersion", required}, {"source.kind", required}, {"source.name", required}}},
		{"item with bad attributes", inventoryItem(func(i *kollect.InventoryItem) {
			i.Attributes["1bad"] = kollect.Value{Raw: []byte("1")}
			i.Attributes["broken"] = kollect.Value{Raw: []byte("{")}
		}), []fieldErr{{"attributes[1bad]", invalid}, {"attributes[broken]", invalid}}},
		{"item from another namespace", inventoryItem(func(i *kollect.InventoryItem) { i.Source.Namespace = "team-b" }),
			[]fieldErr{{"source.namespace", invalid}}},
		{"item with bad name and hash", inventoryItem(func(i *kollect.InventoryItem) { i.Name, i.Hash = "Web", "abc" }),
			[]fieldErr{{"hash", invalid}, {"metadata.name", invalid}}},
		{"item update changing source.uid", inventoryItemUpdate(func(i *kollect.InventoryItem) { i.Source.UID = "other" }),
			[]fieldErr{{"source.uid", invalid}}},

		// ClusterInventoryItem
		{"cluster item with bad source and object", clusterInventoryItem(func(i *kollect.ClusterInventoryItem) {
			i.Source.APIVersion = "a/b/c"
			i.Source.Namespace = "Team-A"
			i.Object = &kollect.Value{Raw: []byte("{]")}
		}), []fieldErr{{"object", invalid}, {"source.apiVersion", invalid}, {"source.namespace", invalid}}},
		{"cluster item update changing source.uid", clusterInventoryItemUpdate(func(i *kollect.ClusterInventoryItem) { i.Source.UID = "" }),
			[]fieldErr{{"source.uid", invalid}}},

		// Status
		{"inventory status with bad entries", inventoryStatus(func(s *kollect.InventoryStatus) {
			s.ObservedGeneration = -1
			s.SinkExports[1].Family = kollect.SinkFamilySnapshot
			s.SinkExports[2].Family = "Blob"
			s.SinkExports[2].Outcome = "Maybe"
			s.SinkExports[0].Message = strings.Repeat("m", 4097)
			s.SinkExports[0].Reason = "not camel"
			s.SinksSynced = "all"
		}), []fieldErr{
			{"status.observedGeneration", invalid}, {"status.sinkExports[0].message", tooLong}, {"status.sinkExports[0].reason", invalid},
			{"status.sinkExports[1].name", duplicate}, {"status.sinkExports[2].family", notSupported}, {"status.sinkExports[2].outcome", notSupported},
			{"status.sinksSynced", invalid},
		}},
		{"inventory status with incomplete condition", inventoryStatus(func(s *kollect.InventoryStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: kollect.ConditionSynced, Status: "Maybe"})
		}), []fieldErr{{"status.conditions[1].lastTransitionTime", required}, {"status.conditions[1].reason", required}, {"status.conditions[1].status", notSupported}}},
		{"target status with negative counts", func() field.ErrorList {
			return ValidateTargetStatus(&kollect.TargetStatus{Collection: &kollect.CollectionObservation{ItemCount: -1, Reason: "kind-not-found"}}, field.NewPath("status"))
		}, []fieldErr{{"status.collection.itemCount", invalid}, {"status.collection.reason", invalid}}},
		{"cluster target status with duplicate namespace", func() field.ErrorList {
			return ValidateClusterTargetStatus(&kollect.ClusterTargetStatus{MatchedNamespaces: []string{"a", "a"}}, field.NewPath("status"))
		}, []fieldErr{{"status.matchedNamespaces[1]", duplicate}}},
		{"sink status with negative latency", func() field.ErrorList {
			return ValidateSinkStatus(&kollect.SinkStatus{Probe: &kollect.ProbeResult{LatencyMillis: -5}}, field.NewPath("status"))
		}, []fieldErr{{"status.probe.latencyMillis", invalid}}},
		{"profile status with bad resource", func() field.ErrorList {
			return ValidateProfileStatus(&kollect.ProfileStatus{Resource: "Deployments"}, field.NewPath("status"))
		}, []fieldErr{{"status.resource", invalid}}},
	}
	expectErrors(t, tests)
}

// expectErrors runs each case and wants exactly its errors, by path and type.
func expectErrors(t *testing.T, tests []invalidCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldErrs(tc.validate())
			want := append([]fieldErr(nil), tc.want...)
			sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("errors:\n got  %v\n want %v\n full: %v", got, want, tc.validate())
			}
		})
	}
}
