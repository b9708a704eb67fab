// Package isolation is the end-to-end suite of the sinks' network policy
// (issue 12, acceptance point 1): kollect-apiserver runs WITHOUT
// --allow-private-sink-endpoints, with --allowed-sink-cidrs=127.0.0.2/32
// and --sink-dns-server pointing at a DNS server this test runs
// (pkg/netguard/dnstest), whose answers the tests change while the server
// runs. Linux routes all of 127.0.0.0/8 to the loopback interface, so
// 127.0.0.2 stands in for a public address the sinks may reach, and the
// test's listeners on 127.0.0.1, [::1] and a Unix socket stand in for the
// internal services they must not.
package isolation

import (
	"fmt"
	"os"
	"testing"

	"kollect.dev/kollect/pkg/netguard/dnstest"
	"kollect.dev/kollect/test/e2e/framework"
)

var (
	env framework.Env
	dns *dnstest.Server
)

func TestMain(m *testing.M) {
	var err error
	if dns, err = dnstest.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/isolation: starting the DNS server: %v\n", err)
		os.Exit(1)
	}
	code := framework.Main(m, &env, framework.Options{KollectArgs: []string{
		"--allowed-sink-cidrs=127.0.0.2/32",
		"--sink-dns-server=" + dns.Addr(),
	}})
	_ = dns.Close()
	os.Exit(code)
}
