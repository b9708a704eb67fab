package isolation

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

const stream = "ISOLATION"

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// namespace creates a namespace deleted after the test.
func namespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	kube := env.Kube(t)
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err, "namespace "+name)
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func postgresDSN() string {
	if dsn := os.Getenv("KOLLECT_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// sinkCase is one sink: its kind (webhook, nats, git or postgres), its
// endpoint, the data of its Secret (none when nil), the DNS answers the
// test sets before creating it, and what its probe must report.
type sinkCase struct {
	name     string
	kind     string
	endpoint string
	secret   map[string]string
	dns      func()
	// outcomes are the acceptable status.probe.outcome values; message is
	// part of status.probe.message.
	outcomes []string
	message  string
}

// create makes the sink (and its Secret) in ns.
func (c sinkCase) create(ctx context.Context, t *testing.T, api versioned.Interface, ns string) error {
	t.Helper()
	var ref *v1alpha1.LocalObjectReference
	if c.secret != nil {
		ref = &v1alpha1.LocalObjectReference{Name: c.name}
		_, err := env.Kube(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: ns}, StringData: c.secret}, metav1.CreateOptions{})
		must(t, err, "secret "+c.name)
	}
	meta := metav1.ObjectMeta{Name: c.name, Namespace: ns}
	sinks := api.KollectV1alpha1()
	var err error
	switch c.kind {
	case "webhook":
		_, err = sinks.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{ObjectMeta: meta, Spec: v1alpha1.EventSinkSpec{
			Type: v1alpha1.EventSinkWebhook, Endpoint: c.endpoint, SecretRef: ref,
			Webhook: &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 5 * time.Second}, MaxAttempts: 1},
		}}, metav1.CreateOptions{})
	case "nats":
		_, err = sinks.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{ObjectMeta: meta, Spec: v1alpha1.EventSinkSpec{
			Type: v1alpha1.EventSinkNATS, Endpoint: c.endpoint, SecretRef: ref, NATS: &v1alpha1.NATSSinkConfig{Stream: stream},
		}}, metav1.CreateOptions{})
	case "git":
		_, err = sinks.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{ObjectMeta: meta, Spec: v1alpha1.SnapshotSinkSpec{
			Type: v1alpha1.SnapshotSinkGit, Endpoint: c.endpoint, SecretRef: ref, Git: &v1alpha1.GitSinkConfig{},
		}}, metav1.CreateOptions{})
	case "postgres":
		_, err = sinks.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{ObjectMeta: meta, Spec: v1alpha1.DatabaseSinkSpec{
			Type: v1alpha1.DatabaseSinkPostgres, Endpoint: c.endpoint, SecretRef: ref,
		}}, metav1.CreateOptions{})
	default:
		t.Fatalf("unknown sink kind %q", c.kind)
	}
	return err
}

// probe returns the sink's last probe result, nil before the first.
func (c sinkCase) probe(ctx context.Context, api versioned.Interface, ns string) (*v1alpha1.ProbeResult, error) {
	var status v1alpha1.SinkStatus
	sinks := api.KollectV1alpha1()
	switch c.kind {
	case "webhook", "nats":
		s, err := sinks.EventSinks(ns).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		status = s.Status
	case "git":
		s, err := sinks.SnapshotSinks(ns).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		status = s.Status
	default:
		s, err := sinks.DatabaseSinks(ns).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		status = s.Status
	}
	if status.Probe == nil || status.Probe.Time == nil {
		return nil, nil
	}
	return status.Probe, nil
}

// TestDialTimeRefusals points webhook, git, NATS and PostgreSQL sinks at
// loopback listeners of the test by every trick admission cannot see: DNS
// answers that change after admission (rebinding), names that resolve
// only later, mixed answers, redirects, servers a NATS server advertises,
// connection strings in Secrets (hosts, fallbacks, Unix sockets, file
// parameters). No listener sees a connection, and each sink's probe
// reports the refusal's class. One sink per kind on the allowed 127.0.0.2
// shows the probes do connect where the policy allows.
func TestDialTimeRefusals(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	const ns = "isolation-dial"
	namespace(ctx, t, ns)
	api := env.KollectClient(t)

	f := startForbidden(t)
	p := f.port
	hook, hookHits := webhookReceiver(t, f)
	_, hookPort, _ := net.SplitHostPort(hook)
	gitAddr, gitHits := gitServer(t, f)
	natsAddr := natsServer(ctx, t, stream)
	fakeNATS, fakeConns := advertisingNATS(t, "127.0.0.1:"+p)
	dsn, err := url.Parse(postgresDSN())
	must(t, err, "KOLLECT_TEST_POSTGRES_DSN")
	pgAddr, pgConns := pgProxy(t, postgresDSN())
	_, pgPort, _ := net.SplitHostPort(pgAddr)
	pgUser, pgDB := dsn.User.Username(), strings.TrimPrefix(dsn.Path, "/")
	sshKey, knownHosts := sshKeys(t, "g-ssh-rebind.test:"+p)
	dns.Set("loop.test", "127.0.0.1")

	// rebind answers 127.0.0.2 to admission's lookup and later to every
	// other; late answers NXDOMAIN to admission; set answers the same always.
	rebind := func(name string, later ...string) func() {
		return func() { dns.Sequence(name, []string{"127.0.0.2"}, later) }
	}
	late := func(name string, later ...string) func() { return func() { dns.Sequence(name, nil, later) } }
	set := func(name string, addrs ...string) func() { return func() { dns.Set(name, addrs...) } }
	refused := []string{"AddressForbidden"}
	keyword := func(host, port string, extra ...string) map[string]string {
		return map[string]string{"dsn": strings.Join(append([]string{"host=" + host, "port=" + port, "user=" + pgUser, "dbname=" + pgDB, "sslmode=disable", "connect_timeout=5"}, extra...), " ")}
	}

	cases := []sinkCase{
		// Webhook: names that change, or answer forbidden addresses only
		// once admission has passed, and redirects it does not follow.
		{name: "w-rebind", kind: "webhook", endpoint: "http://w-rebind.test:" + p + "/hook", dns: rebind("w-rebind.test", "127.0.0.1"),
			outcomes: refused, message: "w-rebind.test resolves to a loopback address"},
		{name: "w-late", kind: "webhook", endpoint: "http://w-late.test:" + p + "/hook", dns: late("w-late.test", "127.0.0.1"),
			outcomes: refused, message: "w-late.test resolves to a loopback address"},
		{name: "w-mixed", kind: "webhook", endpoint: "http://w-mixed.test:" + p + "/hook", dns: rebind("w-mixed.test", "127.0.0.2", "::1"),
			outcomes: refused, message: "w-mixed.test resolves to a loopback address"},
		{name: "w-zero", kind: "webhook", endpoint: "http://w-zero.test:" + p + "/hook", dns: late("w-zero.test", "0.0.0.0"),
			outcomes: refused, message: "w-zero.test resolves to an unspecified address"},
		{name: "w-mapped", kind: "webhook", endpoint: "http://w-mapped.test:" + p + "/hook", dns: late("w-mapped.test", "::ffff:127.0.0.1"),
			outcomes: refused, message: "w-mapped.test resolves to a loopback address"},
		{name: "w-ipv6", kind: "webhook", endpoint: "http://w-ipv6.test:" + p + "/hook", dns: rebind("w-ipv6.test", "::1"),
			outcomes: refused, message: "w-ipv6.test resolves to a loopback address"},
		{name: "w-nat64", kind: "webhook", endpoint: "http://w-nat64.test:" + p + "/hook", dns: late("w-nat64.test", "64:ff9b::7f00:1"),
			outcomes: refused, message: "w-nat64.test resolves to a loopback address"},
		{name: "w-metadata", kind: "webhook", endpoint: "http://w-metadata.test/latest/meta-data", dns: late("w-metadata.test", "169.254.169.254"),
			outcomes: refused, message: "w-metadata.test resolves to a cloud metadata address"},
		{name: "w-private", kind: "webhook", endpoint: "http://w-private.test:" + p + "/hook", dns: rebind("w-private.test", "10.0.0.1"),
			outcomes: refused, message: "w-private.test resolves to a private address"},
		{name: "w-linklocal", kind: "webhook", endpoint: "http://w-linklocal.test:" + p + "/hook", dns: late("w-linklocal.test", "169.254.10.1"),
			outcomes: refused, message: "w-linklocal.test resolves to a link-local address"},
		{name: "w-cgnat", kind: "webhook", endpoint: "http://w-cgnat.test:" + p + "/hook", dns: rebind("w-cgnat.test", "100.64.0.1"),
			outcomes: refused, message: "w-cgnat.test resolves to a shared (CGNAT) address"},
		{name: "w-redirect", kind: "webhook", endpoint: "http://" + hook + "/redirect",
			outcomes: []string{"HTTPStatus"}, message: "answered HTTP 302: redirects are not followed"},
		{name: "w-redirect-name", kind: "webhook", endpoint: "http://" + hook + "/redirect-name",
			outcomes: []string{"HTTPStatus"}, message: "answered HTTP 307: redirects are not followed"},

		// Git over http(s) and ssh; redirects from an allowed server are
		// new connections through the same check.
		{name: "g-rebind", kind: "git", endpoint: "http://g-rebind.test:" + p + "/repo.git", dns: rebind("g-rebind.test", "127.0.0.1"),
			outcomes: refused, message: "g-rebind.test resolves to a loopback address"},
		{name: "g-late", kind: "git", endpoint: "https://g-late.test:" + p + "/repo.git", dns: late("g-late.test", "127.0.0.1"),
			outcomes: refused, message: "g-late.test resolves to a loopback address"},
		{name: "g-ipv6", kind: "git", endpoint: "https://g-ipv6.test:" + p + "/repo.git", dns: late("g-ipv6.test", "::1"),
			outcomes: refused, message: "g-ipv6.test resolves to a loopback address"},
		{name: "g-mapped", kind: "git", endpoint: "http://g-mapped.test:" + p + "/repo.git", dns: late("g-mapped.test", "::ffff:127.0.0.1"),
			outcomes: refused, message: "g-mapped.test resolves to a loopback address"},
		{name: "g-nat64", kind: "git", endpoint: "https://g-nat64.test:" + p + "/repo.git", dns: rebind("g-nat64.test", "64:ff9b::7f00:1"),
			outcomes: refused, message: "g-nat64.test resolves to a loopback address"},
		{name: "g-redirect", kind: "git", endpoint: "http://" + gitAddr + "/redirect.git",
			outcomes: refused, message: "127.0.0.1 is a loopback address"},
		{name: "g-redirect-name", kind: "git", endpoint: "http://" + gitAddr + "/redirect-name.git",
			outcomes: refused, message: "loop.test resolves to a loopback address"},
		{name: "g-ssh-rebind", kind: "git", endpoint: "ssh://git@g-ssh-rebind.test:" + p + "/repo.git", dns: rebind("g-ssh-rebind.test", "127.0.0.1"),
			secret: map[string]string{"ssh-privatekey": sshKey, "known_hosts": knownHosts}, outcomes: refused, message: "g-ssh-rebind.test resolves to a loopback address"},
		{name: "g-ssh-zero", kind: "git", endpoint: "ssh://git@g-ssh-zero.test:" + p + "/repo.git", dns: late("g-ssh-zero.test", "0.0.0.0"),
			secret: map[string]string{"ssh-privatekey": sshKey, "known_hosts": knownHosts}, outcomes: refused, message: "g-ssh-zero.test resolves to an unspecified address"},

		// NATS: the same name tricks, and a server that advertises another
		// server on a forbidden address.
		{name: "n-rebind", kind: "nats", endpoint: "nats://n-rebind.test:" + p, dns: rebind("n-rebind.test", "127.0.0.1"),
			outcomes: refused, message: "n-rebind.test resolves to a loopback address"},
		{name: "n-late", kind: "nats", endpoint: "nats://n-late.test:" + p, dns: late("n-late.test", "127.0.0.1"),
			outcomes: refused, message: "n-late.test resolves to a loopback address"},
		{name: "n-zero", kind: "nats", endpoint: "nats://n-zero.test:" + p, dns: late("n-zero.test", "0.0.0.0"),
			outcomes: refused, message: "n-zero.test resolves to an unspecified address"},
		{name: "n-ipv6", kind: "nats", endpoint: "nats://n-ipv6.test:" + p, dns: rebind("n-ipv6.test", "::1"),
			outcomes: refused, message: "n-ipv6.test resolves to a loopback address"},
		{name: "n-nat64", kind: "nats", endpoint: "nats://n-nat64.test:" + p, dns: late("n-nat64.test", "64:ff9b::7f00:1"),
			outcomes: refused, message: "n-nat64.test resolves to a loopback address"},
		{name: "n-mixed", kind: "nats", endpoint: "tls://n-mixed.test:" + p, dns: rebind("n-mixed.test", "127.0.0.2", "::ffff:127.0.0.1"),
			outcomes: refused, message: "n-mixed.test resolves to a loopback address"},
		{name: "n-advertised", kind: "nats", endpoint: "nats://" + fakeNATS,
			// The fake server answers no JetStream request: the probe fails
			// on that, never on a connection to the advertised server.
			outcomes: []string{"Timeout", "Protocol"}, message: fakeNATS},

		// PostgreSQL: connection strings in the Secret, which admission
		// never sees.
		{name: "p-host", kind: "postgres", secret: keyword("127.0.0.1", p),
			outcomes: refused, message: "127.0.0.1 is a loopback address"},
		{name: "p-url", kind: "postgres", secret: map[string]string{"dsn": "postgres://" + pgUser + "@127.0.0.1:" + p + "/" + pgDB + "?sslmode=disable"},
			outcomes: refused, message: "127.0.0.1 is a loopback address"},
		{name: "p-name", kind: "postgres", secret: keyword("p-name.test", p), dns: set("p-name.test", "127.0.0.1"),
			outcomes: refused, message: "p-name.test resolves to a loopback address"},
		{name: "p-localhost", kind: "postgres", secret: keyword("localhost", p),
			outcomes: refused, message: "localhost resolves to a loopback address"},
		{name: "p-zero", kind: "postgres", secret: keyword("0.0.0.0", p),
			outcomes: refused, message: "0.0.0.0 is an unspecified address"},
		{name: "p-mapped", kind: "postgres", secret: keyword("::ffff:127.0.0.1", p),
			outcomes: refused, message: "::ffff:127.0.0.1 is a loopback address"},
		{name: "p-fallback", kind: "postgres", secret: keyword("127.0.0.2,127.0.0.1", pgPort+","+p, "target_session_attrs=standby"),
			outcomes: refused, message: "127.0.0.1 is a loopback address"},
		{name: "p-fallback-name", kind: "postgres", secret: keyword("127.0.0.2,loop.test", pgPort+","+p, "target_session_attrs=read-only"),
			outcomes: refused, message: "loop.test resolves to a loopback address"},
		{name: "p-socket", kind: "postgres", secret: keyword(f.socketDir, "5432"),
			outcomes: refused, message: f.socketDir + " is a local socket"},
		{name: "p-socket-url", kind: "postgres", secret: map[string]string{"dsn": "postgres:///" + pgDB + "?host=" + f.socketDir + "&user=" + pgUser},
			outcomes: refused, message: f.socketDir + " is a local socket"},
		{name: "p-hostaddr", kind: "postgres", secret: keyword("db.example.org", p, "hostaddr=127.0.0.1"),
			outcomes: []string{"Protocol"}, message: "secret key dsn sets hostaddr, which a sink may not"},
		{name: "p-passfile", kind: "postgres", secret: keyword("127.0.0.2", pgPort, "passfile=/etc/passwd"),
			outcomes: []string{"Protocol"}, message: "secret key dsn sets passfile, which a sink may not"},
		{name: "p-servicefile", kind: "postgres", secret: map[string]string{"dsn": "service=x servicefile=/etc/passwd"},
			// pgx names whichever of the two it checks first.
			outcomes: []string{"Protocol"}, message: "secret key dsn sets service"},
		{name: "p-endpoint-rebind", kind: "postgres", endpoint: "postgres://p-endpoint-rebind.test:" + p + "/" + pgDB + "?sslmode=disable",
			secret: map[string]string{"username": pgUser, "password": "x"}, dns: rebind("p-endpoint-rebind.test", "127.0.0.1"),
			outcomes: refused, message: "p-endpoint-rebind.test resolves to a loopback address"},
		{name: "p-endpoint-late", kind: "postgres", endpoint: "postgres://p-endpoint-late.test:" + p + "/" + pgDB + "?sslmode=disable",
			dns: late("p-endpoint-late.test", "::1"), outcomes: refused, message: "p-endpoint-late.test resolves to a loopback address"},

		// Positive controls: the allowed address is reached, by each kind.
		{name: "w-allowed", kind: "webhook", endpoint: "http://w-allowed.test:" + hookPort + "/hook", dns: set("w-allowed.test", "127.0.0.2"),
			outcomes: []string{"Succeeded"}, message: "the sink accepted a connection"},
		{name: "g-allowed", kind: "git", endpoint: "http://" + gitAddr + "/repo.git",
			outcomes: []string{"Succeeded"}, message: "the sink accepted a connection"},
		{name: "n-allowed", kind: "nats", endpoint: "nats://" + natsAddr,
			outcomes: []string{"Succeeded"}, message: "the sink accepted a connection"},
		{name: "p-allowed", kind: "postgres", secret: keyword("127.0.0.2", pgPort),
			outcomes: []string{"Succeeded"}, message: "the sink accepted a connection"},
	}

	for _, c := range cases {
		if c.dns != nil {
			c.dns()
		}
		must(t, c.create(ctx, t, api, ns), "creating sink "+c.name)
	}
	pending := slices.Clone(cases)
	results := map[string]*v1alpha1.ProbeResult{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pending = slices.DeleteFunc(pending, func(c sinkCase) bool {
			pr, err := c.probe(ctx, api, ns)
			if err != nil || pr == nil {
				return false
			}
			results[c.name] = pr
			return true
		})
		return len(pending) == 0, nil
	})
	if err != nil {
		names := make([]string, len(pending))
		for i, c := range pending {
			names[i] = c.name
		}
		t.Fatalf("no probe result within 3 minutes for %v", names)
	}
	for _, c := range cases {
		pr := results[c.name]
		if !slices.Contains(c.outcomes, pr.Outcome) || !strings.Contains(pr.Message, c.message) || pr.Succeeded != (pr.Outcome == "Succeeded") {
			t.Errorf("%s (%s %s): probe outcome %q, message %q; want one of %v with %q", c.name, c.kind, c.endpoint, pr.Outcome, pr.Message, c.outcomes, c.message)
		}
		if pr.Outcome != "Succeeded" && strings.Contains(pr.Message, f.port) && c.kind != "postgres" && !strings.Contains(c.endpoint, f.port) {
			t.Errorf("%s: the probe message names the forbidden port: %q", c.name, pr.Message)
		}
	}
	t.Logf("%d sinks probed: %d refused at dial time or by their Secret, %d positive controls", len(cases), len(cases)-4, 4)

	// Nothing reached a forbidden listener; the allowed servers were
	// reached (so the refusals above are the policy's, not a dead network).
	f.check(t)
	for what, n := range map[string]int64{
		"the webhook receiver": hookHits.Load(), "the git server": gitHits.Load(),
		"the advertising NATS server": fakeConns.Load(), "the PostgreSQL proxy": pgConns.Load(),
	} {
		if n == 0 {
			t.Errorf("%s on 127.0.0.2 got no connection", what)
		}
	}
}

// TestAdmissionRefusals: endpoints that are, or resolve at admission to,
// an address sinks may not reach are refused with 422 on spec.endpoint,
// naming the flags, and nothing is stored; an allowed name is admitted.
func TestAdmissionRefusals(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const ns = "isolation-admission"
	namespace(ctx, t, ns)
	api := env.KollectClient(t)
	dns.Set("adm-loop.test", "127.0.0.1")
	dns.Set("adm-meta.test", "169.254.169.254")
	dns.Set("adm-mixed.test", "127.0.0.2", "::1")
	dns.Set("adm-cgnat.test", "100.64.0.1")
	dns.Set("adm-ok.test", "127.0.0.2")

	const forbidden, invalid, accepted = "forbidden", "invalid", "accepted"
	for _, tc := range []struct {
		sinkCase
		want string
	}{
		{sinkCase{name: "a-decimal", kind: "webhook", endpoint: "http://2130706433/hook"}, invalid},
		{sinkCase{name: "a-hex", kind: "webhook", endpoint: "http://0x7f000001/hook"}, invalid},
		{sinkCase{name: "a-octal", kind: "webhook", endpoint: "http://0177.0.0.1/hook"}, invalid},
		{sinkCase{name: "a-short", kind: "git", endpoint: "https://127.1/repo.git"}, invalid},
		{sinkCase{name: "a-mapped", kind: "webhook", endpoint: "http://[::ffff:127.0.0.1]/hook", message: "::ffff:127.0.0.1 is a loopback address"}, forbidden},
		{sinkCase{name: "a-nat64", kind: "webhook", endpoint: "http://[64:ff9b::7f00:1]/hook", message: "64:ff9b::7f00:1 is a loopback address"}, forbidden},
		{sinkCase{name: "a-zero", kind: "git", endpoint: "https://0.0.0.0/repo.git", message: "0.0.0.0 is an unspecified address"}, forbidden},
		{sinkCase{name: "a-unspecified6", kind: "git", endpoint: "https://[::]/repo.git", message: ":: is an unspecified address"}, forbidden},
		{sinkCase{name: "a-loopback6", kind: "git", endpoint: "https://[::1]/repo.git", message: "::1 is a loopback address"}, forbidden},
		{sinkCase{name: "a-loopback", kind: "git", endpoint: "http://127.0.0.1:8080/repo.git", message: "127.0.0.1 is a loopback address"}, forbidden},
		{sinkCase{name: "a-imds", kind: "git", endpoint: "ssh://git@169.254.169.254/repo.git", message: "169.254.169.254 is a cloud metadata address"}, forbidden},
		{sinkCase{name: "a-localhost", kind: "nats", endpoint: "nats://localhost:4222", message: "localhost resolves to ::1, a loopback address"}, forbidden},
		{sinkCase{name: "a-metadata-name", kind: "nats", endpoint: "nats://metadata.google.internal:80", message: "metadata.google.internal is a cloud metadata address"}, forbidden},
		{sinkCase{name: "a-mixed", kind: "nats", endpoint: "nats://adm-mixed.test:4222", message: "adm-mixed.test resolves to ::1, a loopback address"}, forbidden},
		{sinkCase{name: "a-name", kind: "webhook", endpoint: "http://adm-loop.test/hook", message: "adm-loop.test resolves to 127.0.0.1, a loopback address"}, forbidden},
		{sinkCase{name: "a-name-meta", kind: "postgres", endpoint: "postgres://adm-meta.test/db", message: "adm-meta.test resolves to 169.254.169.254, a cloud metadata address"}, forbidden},
		{sinkCase{name: "a-pg-host", kind: "postgres", endpoint: "postgres://db.example.org/app?host=127.0.0.1", message: "127.0.0.1 is a loopback address"}, forbidden},
		{sinkCase{name: "a-pg-hostaddr", kind: "postgres", endpoint: "postgres://adm-ok.test/app?hostaddr=adm-cgnat.test", message: "adm-cgnat.test resolves to 100.64.0.1, a shared (CGNAT) address"}, forbidden},
		{sinkCase{name: "a-allowed", kind: "webhook", endpoint: "http://adm-ok.test/hook"}, accepted},
		{sinkCase{name: "a-allowed-literal", kind: "nats", endpoint: "nats://127.0.0.2:4222"}, accepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.create(ctx, t, api, ns)
			if tc.want == accepted {
				must(t, err, "create")
				return
			}
			status, ok := err.(apierrors.APIStatus)
			if !ok || !apierrors.IsInvalid(err) || status.Status().Details == nil {
				t.Fatalf("create: %v, want 422 Invalid", err)
			}
			var causes []string
			found := false
			for _, c := range status.Status().Details.Causes {
				causes = append(causes, fmt.Sprintf("%s %s: %s", c.Field, c.Type, c.Message))
				wantType := metav1.CauseTypeFieldValueInvalid
				if tc.want == forbidden {
					wantType = metav1.CauseTypeForbidden
				}
				if c.Field == "spec.endpoint" && c.Type == wantType && strings.Contains(c.Message, tc.message) &&
					(tc.want != forbidden || strings.Contains(c.Message, "--allow-private-sink-endpoints")) {
					found = true
				}
			}
			if !found {
				t.Errorf("causes %v; want a %s spec.endpoint naming %q and the flag", causes, tc.want, tc.message)
			}
			if _, err := tc.probe(ctx, api, ns); !apierrors.IsNotFound(err) {
				t.Errorf("the refused sink is stored: %v", err)
			}
		})
	}
}

// TestExportRefusal: an Inventory exporting to a sink whose name rebinds
// to loopback after admission exports nothing there, and its status names
// the refusal in the words the probe uses (the host, not the address).
func TestExportRefusal(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const ns = "isolation-export"
	namespace(ctx, t, ns)
	api := env.KollectClient(t)
	f := startForbidden(t)
	dns.Sequence("inv-git.test", []string{"127.0.0.2"}, []string{"127.0.0.1"})
	c := sinkCase{name: "audit", kind: "git", endpoint: "http://inv-git.test:" + f.port + "/repo.git"}
	must(t, c.create(ctx, t, api, ns), "sink")
	_, err := api.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: ns},
		Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}}},
	}, metav1.CreateOptions{})
	must(t, err, "inventory")
	const want = "inv-git.test resolves to a loopback address"
	var last string
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		inv, err := api.KollectV1alpha1().Inventories(ns).Get(ctx, "all", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, e := range inv.Status.SinkExports {
			last = fmt.Sprintf("%s %s: %s", e.Outcome, e.Reason, e.Message)
			if e.Name == "audit" && e.Outcome == v1alpha1.OutcomeFailed && strings.Contains(e.Message, want) {
				if strings.Contains(e.Message, "127.0.0.1") {
					t.Errorf("the export status shows the resolved address: %q", e.Message)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Inventory's status never named the refusal %q; last: %s", want, last)
	}
	f.check(t)
}
