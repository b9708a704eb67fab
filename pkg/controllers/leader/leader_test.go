package leader

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestOptions(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("defaults invalid: %v", errs)
	}
	if err := fs.Parse([]string{"--resync-period=30s", "--leader-election-namespace=ops", "--leader-election-lease-duration=4s",
		"--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s", "--collect-workers=2"}); err != nil {
		t.Fatal(err)
	}
	if o.ResyncPeriod != 30*time.Second || o.Namespace != "ops" || o.Workers != 2 || !o.LeaderElect {
		t.Errorf("flags not applied: %+v", o)
	}
	if err := fs.Parse([]string{"--leader-election-renew-deadline=5s", "--resync-period=0"}); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) != 2 {
		t.Errorf("want two errors (renew deadline above lease duration, zero resync), got %v", errs)
	}
}

func TestIdentity(t *testing.T) {
	a, b := Identity(), Identity()
	if a == b || !strings.Contains(a, "_") {
		t.Errorf("identities %q and %q", a, b)
	}
	t.Setenv("POD_NAME", "kollect-apiserver-0")
	if got := Identity(); got != "kollect-apiserver-0" {
		t.Errorf("with POD_NAME: %q", got)
	}
}
