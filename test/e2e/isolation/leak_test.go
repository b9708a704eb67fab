package isolation

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// collectConfigMaps makes a Profile and Target collecting the namespace's
// ConfigMaps, and one ConfigMap, so that Inventories have events to send.
func collectConfigMaps(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	api := env.KollectClient(t).KollectV1alpha1()
	_, err := api.Profiles(ns).Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "cms"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "name", Path: "{.metadata.name}"}}}}, metav1.CreateOptions{})
	must(t, err, "profile")
	_, err = api.Targets(ns).Create(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "cms"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "cms"}}}, metav1.CreateOptions{})
	must(t, err, "target")
	_, err = env.Kube(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payload"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	must(t, err, "configmap")
}

// TestExportErrorsShowNoSecret: webhook receivers on the allowed address echo
// the sink's bearer token in their error answers, the way many servers
// echo what they could not accept. Kollect must redact the Secret's
// values from every status field, Event and log line. Two receivers:
//
//   - /trunc answers 500 with 185 bytes of text, then the token: a body cut
//     to 200 bytes before it is redacted would show the token's first 15
//     bytes in Inventory.status.sinkExports[].message, readable by anyone
//     who may get Inventories (the `view` role, which may not read Secrets).
//   - /quoted answers 400 "bad token <token>" for a token holding a double
//     quote: a body quoted (%q) before it is redacted would escape the
//     quote, and the redaction of the raw value would not match.
//
// (Found by the adversarial review of issue 12: both leaked.)
func TestExportErrorsShowNoSecret(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	const ns = "export-errors"
	namespace(ctx, t, ns)
	collectConfigMaps(ctx, t, ns)
	api := env.KollectClient(t).KollectV1alpha1()
	kube := env.Kube(t)

	const truncToken = "TRUNCSECRET0123456789abcdefghijklmnopqrstuvwxyz"
	const quotedToken = `QUOTED"SECRET"0123456789abcdefghij`
	const internal = "INTERNAL-ERROR-TEXT pq: password authentication failed at 10.9.8.7"
	addr := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK) // the probe passes
			return
		}
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch r.URL.Path {
		case "/trunc":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("x", 185) + got + " " + internal))
		case "/quoted":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("bad token " + got))
		}
	}))
	dns.Set("leak-hook.test", "127.0.0.2")
	_, port, _ := net.SplitHostPort(addr)

	for name, token := range map[string]string{"trunc": truncToken, "quoted": quotedToken} {
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"token": token}}, metav1.CreateOptions{})
		must(t, err, "secret "+name)
		_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "http://leak-hook.test:" + port + "/" + name,
				SecretRef: &v1alpha1.LocalObjectReference{Name: name},
				Webhook:   &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 5 * time.Second}, MaxAttempts: 1}}},
			metav1.CreateOptions{})
		must(t, err, "sink "+name)
	}
	_, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "trunc"}, {Name: "quoted"}}}}, metav1.CreateOptions{})
	must(t, err, "inventory")

	// Wait until both exports failed.
	var statusJSON []byte
	var messages []string
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		inv, err := api.Inventories(ns).Get(ctx, "inv", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		failed := 0
		for _, e := range inv.Status.SinkExports {
			if e.Outcome == v1alpha1.OutcomeFailed && e.Message != "" {
				failed++
			}
		}
		statusJSON, _ = json.Marshal(inv.Status)
		messages = nil
		for _, e := range inv.Status.SinkExports {
			messages = append(messages, e.Message)
		}
		for _, c := range inv.Status.Conditions {
			messages = append(messages, c.Message)
		}
		return failed == 2, nil
	})
	if err != nil {
		t.Fatalf("the exports never both failed; status: %s", statusJSON)
	}
	t.Logf("Inventory status: %s", statusJSON)

	// Everything a namespace viewer can read, plus the server's log.
	var places = map[string]string{"Inventory status messages": strings.Join(messages, "\n")}
	for _, name := range []string{"trunc", "quoted"} {
		s, err := api.EventSinks(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err, "get sink")
		b, _ := json.Marshal(s.Status)
		places["EventSink "+name+" status"] = string(b)
	}
	time.Sleep(2 * time.Second) // Events are written asynchronously
	evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	must(t, err, "events")
	var notes []string
	for _, e := range evs.Items {
		notes = append(notes, e.Reason+": "+e.Message)
	}
	places["Events"] = strings.Join(notes, "\n")
	if logs, err := filepath.Glob(filepath.Join(env.Cluster.Dir(), "logs", "kollect*.log")); err == nil {
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			places["log "+filepath.Base(l)] = string(b)
		}
	}
	// Any 12-byte piece of a token is a leak; so is the quoted form.
	pieces := []string{truncToken[:12], `QUOTED\"SECRET`, "SECRET\\\"0123", quotedToken}
	for where, text := range places {
		for _, p := range pieces {
			if i := strings.Index(text, p); i >= 0 {
				lo, hi := max(0, i-60), min(len(text), i+len(p)+40)
				t.Errorf("%s shows part of a Secret's token (%q): ...%s...", where, p, text[lo:hi])
			}
		}
	}
}
