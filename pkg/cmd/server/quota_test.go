package server

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"kollect.dev/kollect/pkg/tenancy"
)

// TestQuotaFlags: the --default-max-* flags default to
// tenancy.DefaultQuotas, take a quantity for bytes, and refuse negative
// values and item sizes etcd could not store, naming the flag.
func TestQuotaFlags(t *testing.T) {
	parse := func(args ...string) (*Options, error) {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		return o, validateQuotas(o.Quotas)
	}
	o, err := parse()
	if err != nil || o.Quotas != tenancy.DefaultQuotas {
		t.Fatalf("defaults: %+v, %v", o.Quotas, err)
	}
	o, err = parse("--default-max-item-bytes=1.5Mi", "--default-max-items=0", "--default-max-targets=7")
	if err != nil || o.Quotas.MaxItemBytes != 1572864 || o.Quotas.MaxItems != 0 || o.Quotas.MaxTargets != 7 {
		t.Errorf("set: %+v, %v", o.Quotas, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--default-max-item-bytes=2Mi"}, "more than 1.5Mi"},
		{[]string{"--default-max-item-bytes=1e100"}, "more than 1.5Mi"},
		{[]string{"--default-max-item-bytes=lots"}, "default-max-item-bytes"},
		{[]string{"--default-max-item-bytes=-1"}, "--default-max-item-bytes must be 0"},
		{[]string{"--default-max-items=-5"}, "--default-max-items must be 0 (no default limit) or more, not -5"},
		{[]string{"--default-max-sinks=-1"}, "--default-max-sinks"},
	} {
		if _, err := parse(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
