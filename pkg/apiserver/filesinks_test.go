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
)

// TestLocalSinkFlags: file sinks and git sinks on file:// exist only on a
// server started with --file-sink-root and --allow-local-git-sinks; the
// refusal is a 422 naming the field and the flag, and nothing is stored.
// A sink admitted by such a server stays editable on one without them, as
// long as its endpoint does not change.
func TestLocalSinkFlags(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sinks := []struct {
		obj         *v1alpha1.SnapshotSink
		field, flag string
	}{
		{&v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: "files"},
			Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///reports"}},
			"spec.type", "--file-sink-root"},
		{&v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: "local-git"},
			Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "file:///srv/git/inventory.git", Git: &v1alpha1.GitSinkConfig{}}},
			"spec.endpoint", "--allow-local-git-sinks"},
	}

	strict := testserver.Start(t, testserver.Options{})
	api := strict.Client.KollectV1alpha1().SnapshotSinks("default")
	for _, s := range sinks {
		_, err := api.Create(ctx, s.obj.DeepCopy(), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s without %s: got %v, want 422", s.obj.Name, s.flag, err)
			continue
		}
		causes := err.(apierrors.APIStatus).Status().Details.Causes
		if len(causes) != 1 || causes[0].Field != s.field || !strings.Contains(causes[0].Message, s.flag) {
			t.Errorf("%s: causes %+v, want one on %s naming %s", s.obj.Name, causes, s.field, s.flag)
		}
		if _, err := api.Get(ctx, s.obj.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: stored after the refusal: %v", s.obj.Name, err)
		}
	}

	lenient := testserver.Start(t, testserver.Options{FileSinkRoot: t.TempDir(), AllowLocalGitSinks: true, EtcdEndpoint: strict.EtcdEndpoint})
	for _, s := range sinks {
		if _, err := lenient.Client.KollectV1alpha1().SnapshotSinks("default").Create(ctx, s.obj.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Errorf("%s with %s: %v", s.obj.Name, s.flag, err)
		}
	}

	// Back on the strict server: a label is fine, a new endpoint is not.
	for _, s := range sinks {
		obj, err := api.Get(ctx, s.obj.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj.Labels = map[string]string{"edited": "true"}
		if obj, err = api.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%s: relabelling without %s: %v", s.obj.Name, s.flag, err)
			continue
		}
		obj.Spec.Endpoint += "-moved"
		if _, err := api.Update(ctx, obj, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), s.flag) {
			t.Errorf("%s: moving the endpoint without %s: got %v, want 422 naming the flag", s.obj.Name, s.flag, err)
		}
	}
}
