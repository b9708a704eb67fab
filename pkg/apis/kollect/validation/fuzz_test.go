package validation

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// The fuzz targets decode objects from fuzzed JSON straight into the
// internal types, which carry json tags, and validate them: no input may
// make a validator panic, and every error must name a field.

var statusPath = field.NewPath("status")

func addSeeds(f *testing.F, objs ...any) {
	f.Helper()
	for _, obj := range objs {
		data, err := json.Marshal(obj)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"metadata":{"name":"x","namespace":"y"},"spec":null}`))
}

// validateDecoded decodes data into a new T and checks what each validator
// says of it: no error without a field.
func validateDecoded[T any](t *testing.T, data []byte, validators ...func(*T) field.ErrorList) {
	t.Helper()
	var obj T
	if json.Unmarshal(data, &obj) != nil {
		return
	}
	for _, validate := range validators {
		for _, err := range validate(&obj) {
			if err.Field == "" || err.Type.String() == "" || err.Error() == "" {
				t.Fatalf("an error without field or type: %#v", err)
			}
		}
	}
}

// asUpdateOf turns an update validator into one that updates old.
func asUpdateOf[T any](old func() *T, validate func(obj, old *T) field.ErrorList) func(*T) field.ErrorList {
	return func(obj *T) field.ErrorList { return validate(obj, old()) }
}

// asUpdate turns an update validator into one that updates an object to itself.
func asUpdate[T any](validate func(obj, old *T) field.ErrorList) func(*T) field.ErrorList {
	return func(obj *T) field.ErrorList { return validate(obj, obj) }
}

func FuzzValidateInventory(f *testing.F) {
	addSeeds(f, validInventory(), validClusterInventory(),
		&kollect.Inventory{ObjectMeta: nsMeta("x"), Status: *validInventoryStatus()})
	f.Fuzz(func(t *testing.T, data []byte) {
		validateDecoded(t, data, ValidateInventory, asUpdateOf(validInventory, ValidateInventoryUpdate),
			func(inv *kollect.Inventory) field.ErrorList { return ValidateInventoryStatus(&inv.Status, statusPath) })
		validateDecoded(t, data, ValidateClusterInventory, asUpdate(ValidateClusterInventoryUpdate))
	})
}

func FuzzValidateProfile(f *testing.F) {
	addSeeds(f, validProfile(), validResourceProfile(), validSecretsProfile(), validTarget(), validClusterTarget())
	f.Fuzz(func(t *testing.T, data []byte) {
		validateDecoded(t, data, ValidateProfile, asUpdateOf(validProfile, ValidateProfileUpdate),
			func(p *kollect.Profile) field.ErrorList { return ValidateProfileStatus(&p.Status, statusPath) })
		validateDecoded(t, data, asUpdate(ValidateTargetUpdate),
			func(t *kollect.Target) field.ErrorList { return ValidateTargetStatus(&t.Status, statusPath) })
		validateDecoded(t, data, asUpdate(ValidateClusterTargetUpdate),
			func(t *kollect.ClusterTarget) field.ErrorList {
				return ValidateClusterTargetStatus(&t.Status, statusPath)
			})
	})
}

func FuzzValidateSinks(f *testing.F) {
	addSeeds(f, validGitSink(), validFileSink(), validDatabaseSink(), validNATSSink(), validWebhookSink())
	f.Add([]byte(`{"spec":{"type":"postgres","endpoint":"postgres://[::1]:5432/db?host=a,10.0.0.1&hostaddr=169.254.169.254"}}`))
	f.Add([]byte(`{"spec":{"type":"git","endpoint":"ssh://git@[fe80::1%25eth0]:22/x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, opts := range []Options{testOptions, {AllowPrivateSinkEndpoints: true, LookupIP: fakeLookup}} {
			validateDecoded(t, data, withOptions(ValidateSnapshotSink, opts),
				asUpdateOf(validGitSink, withUpdateOptions(ValidateSnapshotSinkUpdate, opts)),
				func(s *kollect.SnapshotSink) field.ErrorList { return ValidateSinkStatus(&s.Status, statusPath) })
			validateDecoded(t, data, withOptions(ValidateDatabaseSink, opts),
				asUpdateOf(validDatabaseSink, withUpdateOptions(ValidateDatabaseSinkUpdate, opts)))
			validateDecoded(t, data, withOptions(ValidateEventSink, opts),
				asUpdateOf(validNATSSink, withUpdateOptions(ValidateEventSinkUpdate, opts)))
		}
	})
}

func FuzzValidateScopesAndItems(f *testing.F) {
	withSelectable := validInventoryItem()
	withSelectable.Source.Cluster, withSelectable.SelectableAttributes = "east", []string{"replicas"}
	addSeeds(f, validScope(), validClusterScope(), validInventoryItem(), validClusterInventoryItem(), withSelectable)
	f.Fuzz(func(t *testing.T, data []byte) {
		validateDecoded(t, data, asUpdate(ValidateScopeUpdate))
		validateDecoded(t, data, asUpdate(ValidateClusterScopeUpdate))
		validateDecoded(t, data, asUpdateOf(validInventoryItem, ValidateInventoryItemUpdate))
		validateDecoded(t, data, asUpdate(ValidateClusterInventoryItemUpdate))
	})
}

func FuzzValidateMemberCluster(f *testing.F) {
	addSeeds(f, validMemberCluster(), &kollect.MemberCluster{ObjectMeta: clusterMeta("east"), Status: *validMemberClusterStatus()})
	f.Add([]byte(`{"spec":{"kubeconfigSecretRef":{"namespace":"a","name":"b","key":"../c"}},"status":{"collection":{"reachable":true,"unreachableSince":"2026-01-01T00:00:00Z","errorClass":"x y"}}}`))
	f.Add([]byte(`{"spec":{"clusterSelector":{"matchLabels":{"region":"eu"}}},"status":{"clusters":[{"name":"east"},{"name":"east","unreachableSince":"2026-01-01T00:00:00Z"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		validateDecoded(t, data, ValidateMemberCluster, asUpdateOf(validMemberCluster, ValidateMemberClusterUpdate),
			func(m *kollect.MemberCluster) field.ErrorList {
				return ValidateMemberClusterStatus(&m.Status, statusPath)
			})
		validateDecoded(t, data, asUpdate(ValidateClusterTargetUpdate),
			func(t *kollect.ClusterTarget) field.ErrorList {
				return ValidateClusterTargetStatus(&t.Status, statusPath)
			})
	})
}
