package apiserver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestRegistryEveryKind drives every user-writable kind through the REST
// surface against a real embedded etcd: create, get, list, watch, update,
// status update, server-side apply by two managers, delete.
func TestRegistryEveryKind(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	dyn := dynamic.NewForConfigOrDie(srv.Config)
	for _, kc := range kindCases {
		t.Run(kc.resource, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			obj := parse(kc.object)
			var client dynamic.ResourceInterface = dyn.Resource(gvr(kc.resource))
			if kc.namespaced {
				client = dyn.Resource(gvr(kc.resource)).Namespace(obj.GetNamespace())
			}

			created, err := client.Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if created.GetGeneration() != 1 || created.GetUID() == "" {
				t.Fatalf("created generation=%d uid=%q", created.GetGeneration(), created.GetUID())
			}
			name := created.GetName()

			list, err := client.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil || len(list.Items) != 1 {
				t.Fatalf("list by name: %v, %d items", err, len(list.Items))
			}
			w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			defer w.Stop()

			// A label change is metadata: no generation bump.
			got, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			got.SetLabels(map[string]string{"tier": "gold"})
			relabelled, err := client.Update(ctx, got, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("update labels: %v", err)
			}
			if relabelled.GetGeneration() != 1 {
				t.Errorf("label update bumped generation to %d", relabelled.GetGeneration())
			}
			expectEvent(t, w, watch.Modified, name)
			if l, err := client.List(ctx, metav1.ListOptions{LabelSelector: "tier=gold"}); err != nil || len(l.Items) != 1 {
				t.Errorf("list by label: %v, %d items", err, len(l.Items))
			}

			// A spec change bumps the generation.
			kc.mutate(relabelled)
			updated, err := client.Update(ctx, relabelled, metav1.UpdateOptions{})
			if err != nil {
				t.Fatalf("update spec: %v", err)
			}
			if updated.GetGeneration() != 2 {
				t.Errorf("spec update: generation %d, want 2", updated.GetGeneration())
			}
			expectEvent(t, w, watch.Modified, name)

			if kc.hasStatus {
				checkStatusSubresource(ctx, t, client, updated, kc.status)
				expectEvent(t, w, watch.Modified, name)
			}
			checkApplyConflict(ctx, t, client, kc, obj)

			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if len(updated.GetFinalizers()) > 0 {
				finalize(ctx, t, client, name)
			}
			if _, err := client.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("get after delete: %v, want NotFound", err)
			}
		})
	}
}

// checkStatusSubresource writes status and checks that spec and labels sent
// along are ignored and that status is ignored on the main resource.
func checkStatusSubresource(ctx context.Context, t *testing.T, client dynamic.ResourceInterface, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	withStatus := obj.DeepCopy()
	for k, v := range status {
		_ = unstructured.SetNestedField(withStatus.Object, runtime.DeepCopyJSONValue(v), "status", k)
	}
	changedSpec := withStatus.DeepCopy()
	kcSpec, _, _ := unstructured.NestedMap(changedSpec.Object, "spec")
	withStatus.SetLabels(map[string]string{"tier": "changed-through-status"})
	_ = unstructured.SetNestedField(withStatus.Object, true, "spec", "suspend")
	out, err := client.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	for k, v := range status {
		got, _, _ := unstructured.NestedFieldNoCopy(out.Object, "status", k)
		if !equality.Semantic.DeepEqual(normalize(got), normalize(v)) && !containsAll(got, v) {
			t.Errorf("status.%s = %v after status update, want %v", k, got, v)
		}
	}
	if spec, _, _ := unstructured.NestedMap(out.Object, "spec"); !equality.Semantic.DeepEqual(spec, kcSpec) {
		t.Errorf("status update changed spec to %v", spec)
	}
	if out.GetLabels()["tier"] != "gold" {
		t.Errorf("status update changed labels to %v", out.GetLabels())
	}
	if out.GetGeneration() != obj.GetGeneration() {
		t.Errorf("status update moved generation %d -> %d", obj.GetGeneration(), out.GetGeneration())
	}

	// Status sent to the main resource is dropped.
	forged := out.DeepCopy()
	_ = unstructured.SetNestedField(forged.Object, int64(99), "status", "observedGeneration")
	back, err := client.Update(ctx, forged, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update with forged status: %v", err)
	}
	if gen, _, _ := unstructured.NestedInt64(back.Object, "status", "observedGeneration"); gen == 99 {
		t.Errorf("main resource accepted status.observedGeneration=99")
	}
}

// normalize round-trips a value through JSON so int64 and float64 compare equal.
func normalize(v any) any {
	var out any
	_ = json.Unmarshal(mustJSON(v), &out)
	return out
}

// containsAll reports whether got holds every key of want, recursively:
// the server may add derived fields next to the reported ones.
func containsAll(got, want any) bool {
	got, want = normalize(got), normalize(want)
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !containsAll(g[k], v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !containsAll(g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return equality.Semantic.DeepEqual(got, want)
	}
}

// checkApplyConflict applies the same field with two managers: the second
// is refused with a conflict naming the field, then wins with force.
func checkApplyConflict(ctx context.Context, t *testing.T, client dynamic.ResourceInterface, kc kindCase, base *unstructured.Unstructured) {
	t.Helper()
	applied := func(value any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(base.GetAPIVersion())
		u.SetKind(base.GetKind())
		u.SetName(base.GetName() + "-ssa")
		u.SetNamespace(base.GetNamespace())
		spec, _, _ := unstructured.NestedMap(base.Object, "spec")
		u.Object["spec"] = spec
		_ = unstructured.SetNestedField(u.Object, value, append([]string{"spec"}, kc.contested...)...)
		return u
	}
	name := base.GetName() + "-ssa"
	if _, err := client.Apply(ctx, name, applied(kc.values[0]), metav1.ApplyOptions{FieldManager: "alice"}); err != nil {
		t.Fatalf("apply as alice: %v", err)
	}
	_, err := client.Apply(ctx, name, applied(kc.values[1]), metav1.ApplyOptions{FieldManager: "bob"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply as bob: %v, want a conflict", err)
	}
	won, err := client.Apply(ctx, name, applied(kc.values[1]), metav1.ApplyOptions{FieldManager: "bob", Force: true})
	if err != nil {
		t.Fatalf("forced apply as bob: %v", err)
	}
	if got, _, _ := unstructured.NestedFieldNoCopy(won.Object, append([]string{"spec"}, kc.contested...)...); got != kc.values[1] {
		t.Errorf("after forced apply %v = %v, want %v", kc.contested, got, kc.values[1])
	}
	managers := map[string]bool{}
	for _, m := range won.GetManagedFields() {
		managers[m.Manager] = true
	}
	if !managers["alice"] || !managers["bob"] {
		t.Errorf("managedFields managers = %v, want alice and bob", managers)
	}
	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete applied object: %v", err)
	}
}

func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed waiting for %s %s", typ, name)
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error waiting for %s %s: %v", typ, name, apierrors.FromObject(ev.Object))
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil || m.GetName() != name {
				continue
			}
			if ev.Type != typ {
				t.Fatalf("watch event %s for %s, want %s", ev.Type, name, typ)
			}
			return
		case <-timeout:
			t.Fatalf("no %s event for %s within 30s", typ, name)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
