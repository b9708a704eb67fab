package validation

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Admission refuses every spelling of a forbidden address in every place
// an endpoint names a host, names the field and the flags, and honours the
// allowed prefixes as the exporters' dialer does.
func TestEndpointAddresses(t *testing.T) {
	allowing := testOptions
	allowing.AllowedSinkCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.2/32")}

	for _, tc := range []struct {
		endpoint string
		opts     Options
		// want is "" (accepted), "forbidden" (a forbidden address) or
		// "invalid" (not a host name at all).
		want string
	}{
		{"https://hooks.example.com/k", testOptions, ""},
		{"https://203.0.113.9/k", testOptions, ""},
		{"https://127.0.0.1/k", testOptions, "forbidden"},
		{"https://127.0.0.2:8443/k", testOptions, "forbidden"},
		{"https://127.0.0.2:8443/k", allowing, ""},
		{"https://[::1]/k", testOptions, "forbidden"},
		{"https://[::]/k", testOptions, "forbidden"},
		{"https://0.0.0.0/k", testOptions, "forbidden"},
		{"https://[::ffff:127.0.0.1]/k", testOptions, "forbidden"},
		{"https://[::ffff:7f00:1]/k", testOptions, "forbidden"},
		{"https://[64:ff9b::7f00:1]/k", testOptions, "forbidden"},
		{"https://[fd00:ec2::254]/k", testOptions, "forbidden"},
		{"https://169.254.169.254/latest/meta-data", testOptions, "forbidden"},
		{"https://169.254.169.254/latest/meta-data", allowing, "forbidden"},
		{"https://metadata.google.internal/computeMetadata/v1", allowing, "forbidden"},
		{"https://localhost/k", testOptions, "forbidden"},
		{"https://LOCALHOST./k", testOptions, "forbidden"},
		{"https://git.internal.example.com/k", testOptions, "forbidden"},
		{"https://git.internal.example.com/k", allowing, ""},
		{"https://imds.example.com/k", testOptions, "forbidden"},
		{"https://cgnat.example.com/k", testOptions, "forbidden"},
		// Numeric forms some resolvers read as IPv4 addresses.
		{"https://2130706433/k", testOptions, "invalid"},
		{"https://0x7f000001/k", testOptions, "invalid"},
		{"https://0177.0.0.1/k", testOptions, "invalid"},
		{"https://127.1/k", testOptions, "invalid"},
	} {
		hook := validWebhookSink()
		hook.Spec.Endpoint = tc.endpoint
		errs := ValidateEventSink(hook, tc.opts)
		checkEndpointErrors(t, tc.endpoint, errs, tc.want)
	}
}

// Postgres endpoints also name hosts in their host and hostaddr query
// parameters.
func TestPostgresEndpointHosts(t *testing.T) {
	for endpoint, want := range map[string]string{
		"postgres://db.example.com/app":                                "",
		"postgres://db.example.com/app?host=10.0.0.5":                  "forbidden",
		"postgres://db.example.com/app?host=db.example.com,127.0.0.1":  "forbidden",
		"postgres://db.example.com/app?hostaddr=169.254.169.254":       "forbidden",
		"postgres://db.example.com/app?host=localhost&port=5432":       "forbidden",
		"postgres://db.example.com/app?host=db.example.com&port=1,2,3": "",
	} {
		db := validDatabaseSink()
		db.Spec.Endpoint = endpoint
		checkEndpointErrors(t, endpoint, ValidateDatabaseSink(db, testOptions), want)
	}
}

func checkEndpointErrors(t *testing.T, endpoint string, errs field.ErrorList, want string) {
	t.Helper()
	switch {
	case want == "" && len(errs) > 0:
		t.Errorf("%s: %v", endpoint, errs)
	case want == "forbidden" && (len(errs) != 1 || errs[0].Type != field.ErrorTypeForbidden || errs[0].Field != "spec.endpoint" ||
		!strings.Contains(errs[0].Detail, "--allow-private-sink-endpoints") || !strings.Contains(errs[0].Detail, "--allowed-sink-cidrs")):
		t.Errorf("%s: %v, want one Forbidden on spec.endpoint naming the flags", endpoint, errs)
	case want == "invalid" && (len(errs) != 1 || errs[0].Type != field.ErrorTypeInvalid || errs[0].Field != "spec.endpoint"):
		t.Errorf("%s: %v, want one Invalid on spec.endpoint", endpoint, errs)
	}
}

// The update of an unchanged endpoint is not checked again (DNS answers
// change); a changed one is.
func TestEndpointUpdate(t *testing.T) {
	old := validWebhookSink()
	old.Spec.Endpoint = "https://git.internal.example.com/k"
	obj := old.DeepCopy()
	obj.Spec.Webhook.MaxAttempts = 3
	if errs := ValidateEventSinkUpdate(obj, old, testOptions); len(errs) > 0 {
		t.Errorf("unchanged endpoint: %v", errs)
	}
	obj.Spec.Endpoint = "https://127.0.0.1/k"
	checkEndpointErrors(t, obj.Spec.Endpoint, ValidateEventSinkUpdate(obj, old, testOptions), "forbidden")
}
