package server

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/tenancy"
)

// addQuotaFlags registers the --default-max-* flags: the quotas of
// namespaces (and of the cluster kinds) whose Scopes (ClusterScopes) do not
// set them.
func addQuotaFlags(fs *pflag.FlagSet, q *tenancy.Quotas) {
	fs.Int32Var(&q.MaxTargets, "default-max-targets", q.MaxTargets,
		"Most Targets a namespace may hold (and ClusterTargets the cluster) where no Scope (ClusterScope) sets maxTargets. 0: no default limit.")
	fs.Int32Var(&q.MaxProfiles, "default-max-profiles", q.MaxProfiles,
		"Most Profiles a namespace may hold where no Scope sets maxProfiles. 0: no default limit.")
	fs.Int32Var(&q.MaxInventories, "default-max-inventories", q.MaxInventories,
		"Most Inventories a namespace may hold (and ClusterInventories the cluster) where no Scope (ClusterScope) sets maxInventories. 0: no default limit.")
	fs.Int32Var(&q.MaxSinks, "default-max-sinks", q.MaxSinks,
		"Most sinks (SnapshotSinks, DatabaseSinks and EventSinks together) a namespace may hold where no Scope sets maxSinks. 0: no default limit.")
	fs.Int64Var(&q.MaxItems, "default-max-items", q.MaxItems,
		"Most InventoryItems a namespace's Targets may hold together (and ClusterInventoryItems the ClusterTargets) where no Scope (ClusterScope) sets maxItems; objects past it are not collected and reported. 0: no default limit.")
	fs.Var(&bytesFlag{&q.MaxItemBytes}, "default-max-item-bytes",
		"Largest InventoryItem (its attributes or object) collected where no Scope (ClusterScope) sets maxItemBytes, as a quantity (64Ki), at most 1.5Mi; larger ones are not collected and reported. 0: no default limit.")
}

// validateQuotas checks the --default-max-* flags.
func validateQuotas(q tenancy.Quotas) error {
	for flag, v := range map[string]int64{
		"default-max-targets": int64(q.MaxTargets), "default-max-profiles": int64(q.MaxProfiles), "default-max-inventories": int64(q.MaxInventories),
		"default-max-sinks": int64(q.MaxSinks), "default-max-items": q.MaxItems, "default-max-item-bytes": q.MaxItemBytes,
	} {
		if v < 0 {
			return fmt.Errorf("--%s must be 0 (no default limit) or more, not %d", flag, v)
		}
	}
	if q.MaxItemBytes > validation.MaxItemBytes.Value() {
		return fmt.Errorf("--default-max-item-bytes must be at most 1.5Mi (etcd's request size limit), not %d", q.MaxItemBytes)
	}
	return nil
}

// bytesFlag is a byte count given as a Kubernetes quantity (64Ki, 1M, 2048).
type bytesFlag struct{ bytes *int64 }

func (f *bytesFlag) String() string {
	if f.bytes == nil {
		return "0"
	}
	return resource.NewQuantity(*f.bytes, resource.BinarySI).String()
}

func (f *bytesFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return err
	}
	if q.Cmp(validation.MaxItemBytes) > 0 {
		// Checked here too: a huge quantity does not fit an int64.
		return fmt.Errorf("%s is more than 1.5Mi, etcd's request size limit", s)
	}
	*f.bytes = q.Value()
	return nil
}

func (f *bytesFlag) Type() string { return "quantity" }
