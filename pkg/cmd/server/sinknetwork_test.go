package server

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestSinkNetworkFlags: --allowed-sink-cidrs and --sink-dns-server are
// parsed into the dialer admission and the exporters share, and bad values
// stop the server naming the flag.
func TestSinkNetworkFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--allowed-sink-cidrs=10.20.0.0/16,fd00:1::/64", "--allowed-sink-cidrs=127.0.0.2", "--sink-dns-server=127.0.0.1:5353"}); err != nil {
		t.Fatal(err)
	}
	d, err := o.sinkDialer()
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:1::/64"), netip.MustParsePrefix("127.0.0.2/32")}
	if got := d.Policy().AllowedCIDRs; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("allowed prefixes %v, want %v", got, want)
	}
	if d.Policy().AllowPrivate {
		t.Error("private endpoints allowed by default")
	}

	for flag, value := range map[string]string{
		"--allowed-sink-cidrs": "10.0.0.1/8",
		"--sink-dns-server":    "dns.example.com:53",
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{flag + "=" + value}); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s=%s: Validate() = %v, want an error naming the flag", flag, value, err)
		}
	}
}

// TestAllowMemberExecFlag: member kubeconfigs may not run plugins unless
// the server says so.
func TestAllowMemberExecFlag(t *testing.T) {
	for args, want := range map[string]bool{"": false, "--allow-member-exec": true, "--allow-member-exec=false": false} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(strings.Fields(args)); err != nil {
			t.Fatal(err)
		}
		if o.AllowMemberExec != want {
			t.Errorf("%q: AllowMemberExec %v, want %v", args, o.AllowMemberExec, want)
		}
	}
}
