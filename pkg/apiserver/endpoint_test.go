package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// TestPrivateSinkEndpoints is issue 5's acceptance point 7: a sink on a
// loopback, private, link-local or metadata address is rejected at
// admission, naming spec.endpoint, unless the server runs with
// --allow-private-sink-endpoints (as the e2e suites do, since their sinks
// listen on 127.0.0.1).
func TestPrivateSinkEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(c versioned.Interface, ns string) map[string]error {
		api := c.KollectV1alpha1()
		out := map[string]error{}
		_, out["webhook on 127.0.0.1"] = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
			ObjectMeta: metav1.ObjectMeta{Name: "hook"},
			Spec:       v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "https://127.0.0.1:8443/hook"},
		}, metav1.CreateOptions{})
		_, out["nats on 10.0.0.5"] = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
			ObjectMeta: metav1.ObjectMeta{Name: "bus"},
			Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: "nats://10.0.0.5:4222",
				NATS: &v1alpha1.NATSSinkConfig{Stream: "kollect"}},
		}, metav1.CreateOptions{})
		_, out["git on the metadata address"] = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: "git"},
			Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://169.254.169.254/repo.git",
				Git: &v1alpha1.GitSinkConfig{}},
		}, metav1.CreateOptions{})
		_, out["postgres on localhost"] = api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, Endpoint: "postgres://localhost:5432/inventory",
				Postgres: &v1alpha1.PostgresSinkConfig{}},
		}, metav1.CreateOptions{})
		return out
	}

	strict := testserver.Start(t, testserver.Options{})
	for what, err := range create(strict.Client, "default") {
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s without --allow-private-sink-endpoints: got %v, want 422", what, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "spec.endpoint") || !strings.Contains(msg, "--allow-private-sink-endpoints") {
			t.Errorf("%s: the rejection should name spec.endpoint and the flag: %s", what, msg)
		}
	}

	lenient := testserver.Start(t, testserver.Options{AllowPrivateSinkEndpoints: true})
	for what, err := range create(lenient.Client, "default") {
		if err != nil {
			t.Errorf("%s with --allow-private-sink-endpoints: %v", what, err)
		}
	}
}
