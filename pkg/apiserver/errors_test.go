package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// bigLabels are about 2 MiB of valid labels: under the 3 MiB request limit,
// over etcd's 1.5 MiB, and unbounded by validation.
func bigLabels() map[string]string {
	labels := map[string]string{}
	for i := range 20000 {
		labels[fmt.Sprintf("example.com/label-%05d", i)] = strings.Repeat("v", 63)
	}
	return labels
}

// TestObjectOverStorageLimit: an object etcd refuses as too large is a 413,
// not the 500 a bare storage error becomes, on create, update and patch,
// and nothing is stored.
func TestObjectOverStorageLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{})
	scopes := srv.Client.KollectV1alpha1().Scopes("team-a")

	_, err := scopes.Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "big", Labels: bigLabels()}}, metav1.CreateOptions{})
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("creating a 2 MiB object: %v, want 413", err)
	}
	if _, err := scopes.Get(ctx, "big", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the refused create: %v, want not found", err)
	}

	small, err := scopes.Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "small"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grown := small.DeepCopy()
	grown.Labels = bigLabels()
	if _, err := scopes.Update(ctx, grown, metav1.UpdateOptions{}); !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("updating to 2 MiB: %v, want 413", err)
	}
	// Patches of 500 KiB of labels each: the fourth takes it past etcd's limit.
	for batch := 0; batch < 8 && err == nil; batch++ {
		_, err = scopes.Patch(ctx, "small", types.MergePatchType, []byte(`{"metadata":{"labels":{`+labelsJSON(batch)+`}}}`), metav1.PatchOptions{})
	}
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("patching labels past the limit: %v, want 413", err)
	}
	if got, err := scopes.Get(ctx, "small", metav1.GetOptions{}); err != nil || len(got.Labels)%5000 != 0 {
		t.Errorf("after the refused writes: %v, %d labels, want whole batches only", err, len(got.Labels))
	}
}

// labelsJSON is 5,000 labels (about 500 KiB) of batch i, as JSON members.
func labelsJSON(batch int) string {
	var b strings.Builder
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"example.com/batch-%d-%05d":%q`, batch, i, strings.Repeat("v", 63))
	}
	return b.String()
}

// TestResourceVersionOnCreate: a new object carrying a resourceVersion is a
// 422 naming the field, not the 500 storage's refusal becomes.
func TestResourceVersionOnCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{})
	api := srv.Client.KollectV1alpha1()
	_, err := api.Scopes("team-a").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "s", ResourceVersion: "12345"}}, metav1.CreateOptions{})
	expectInvalid(t, err, "metadata.resourceVersion", "must not be set on create")
	_, err = api.Targets("team-a").Create(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "t", ResourceVersion: "12345"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "p"}}}, metav1.CreateOptions{})
	expectInvalid(t, err, "metadata.resourceVersion", "must not be set on create")
	if _, err := api.Scopes("team-a").Get(ctx, "s", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the refused create: %v, want not found", err)
	}
}

// TestStrategicMergePatchErrors: a strategic merge patch the generic
// handler cannot apply is a 400 saying why, not a 500, and changes nothing.
func TestStrategicMergePatchErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{})
	api := srv.Client.KollectV1alpha1()
	if _, err := api.Scopes("team-a").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Targets("team-a").Create(ctx, &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "p"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, patch := range map[string]func() error{
		"scope": func() error {
			_, err := api.Scopes("team-a").Patch(ctx, "s", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}},"spec":{"$patch":"explode"}}`), metav1.PatchOptions{})
			return err
		},
		"target status": func() error {
			_, err := api.Targets("team-a").Patch(ctx, "t", types.StrategicMergePatchType, []byte(`{"status":{"$patch":"explode"}}`), metav1.PatchOptions{}, "status")
			return err
		},
	} {
		err := patch()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "unknown patch type: explode") {
			t.Errorf("%s: %v, want 400 naming the unknown patch type", name, err)
		}
	}
	if s, err := api.Scopes("team-a").Get(ctx, "s", metav1.GetOptions{}); err != nil || len(s.Labels) != 0 {
		t.Errorf("after the refused patch: %v, labels %v", err, s.Labels)
	}
}

// TestMalformedResourceVersion: a resourceVersion that is not a number, in
// a query or in an updated object, is a 400 naming it, not the storage's
// parse error answered as a 500, and changes nothing.
func TestMalformedResourceVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{})
	api := srv.Client.KollectV1alpha1()
	s, err := api.Scopes("team-a").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"get": func() error {
			_, err := api.Scopes("team-a").Get(ctx, "s", metav1.GetOptions{ResourceVersion: "abc"})
			return err
		},
		"list": func() error {
			_, err := api.Scopes("team-a").List(ctx, metav1.ListOptions{ResourceVersion: "-1"})
			return err
		},
		"watch": func() error {
			w, err := api.Scopes("team-a").Watch(ctx, metav1.ListOptions{ResourceVersion: "1e3"})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"update": func() error {
			u := s.DeepCopy()
			u.ResourceVersion = "abc"
			u.Labels = map[string]string{"a": "b"}
			_, err := api.Scopes("team-a").Update(ctx, u, metav1.UpdateOptions{})
			return err
		},
		"merge patch": func() error {
			_, err := api.Scopes("team-a").Patch(ctx, "s", types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"x1","labels":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "resourceVersion") {
			t.Errorf("%s: %v, want 400 naming the resourceVersion", name, err)
		}
	}
	if got, err := api.Scopes("team-a").Get(ctx, "s", metav1.GetOptions{}); err != nil || len(got.Labels) != 0 {
		t.Errorf("after the refused writes: %v, labels %v", err, got.Labels)
	}
}
