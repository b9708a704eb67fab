package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	kollectv1alpha1 "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
)

// TestSinkExportWrites: the exporters' in-process entry writes. Four
// exporters of one inventory writing at once lose nothing; the server
// derives the status from the entries in the same write and keeps the
// spec; a write for a deleted inventory, or for a new one of the same name
// (another UID), changes nothing; an invalid entry is refused.
func TestSinkExportWrites(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	invs := srv.Client.KollectV1alpha1().Inventories("entries")
	names := []string{"a", "b", "c", "d"}
	var refs []v1alpha1.SinkReference
	for _, n := range names {
		refs = append(refs, v1alpha1.SinkReference{Name: n})
	}
	inv, err := invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: refs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(inv.UID)
	write := func(uid, sinkName string, i int) error {
		_, errs := srv.API.SinkExports.WriteSinkExports(ctx, false, "entries", "inv", uid, []*v1alpha1.SinkExportStatus{
			entry(sinkName, inv.Generation, i)})
		return errs[0]
	}
	const writes = 25
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			for i := range writes {
				if err := write(uid, n, i+1); err != nil {
					t.Errorf("entry %s, write %d: %v", n, i+1, err)
				}
			}
		})
	}
	wg.Wait()
	got, err := invs.Get(ctx, "inv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.SinkExports) != len(names) {
		t.Fatalf("%d entries, want %d: %+v", len(got.Status.SinkExports), len(names), got.Status.SinkExports)
	}
	for _, e := range got.Status.SinkExports {
		if e.ItemCount != writes || e.Cursor != fmt.Sprint(writes) {
			t.Errorf("entry %s: itemCount %d, cursor %q; want the last write's, %d", e.Name, e.ItemCount, e.Cursor, writes)
		}
	}
	if got.Status.SinksSynced != "4/4" || !isTrue(got.Status.Conditions, "Ready") {
		t.Errorf("derived status: sinksSynced %q, conditions %+v; want 4/4 and Ready", got.Status.SinksSynced, got.Status.Conditions)
	}
	if len(got.Spec.SnapshotSinkRefs) != len(names) || got.Generation != inv.Generation {
		t.Errorf("the spec changed: %+v, generation %d", got.Spec, got.Generation)
	}

	// Entries written together are one update. An entry the validation
	// refuses is not stored, and keeps no entry written with it from
	// being stored.
	bad := &v1alpha1.SinkExportStatus{Family: v1alpha1.SinkFamilySnapshot, Name: "a", Outcome: v1alpha1.OutcomeFailed, Reason: "not a reason"}
	before := got.ResourceVersion
	rvs, errs := srv.API.SinkExports.WriteSinkExports(ctx, false, "entries", "inv", uid, []*v1alpha1.SinkExportStatus{
		entry("b", inv.Generation, 100), entry("c", inv.Generation, 100)})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("two entries in one write: %v", err)
	}
	if n, now := updatesSince(ctx, t, invs, "inv", before); n != 1 || rvs[0] != now || rvs[1] != now {
		t.Errorf("two entries written together made %d updates, the last at resourceVersion %s, reported %v; want 1, that one", n, now, rvs)
	}
	_, errs = srv.API.SinkExports.WriteSinkExports(ctx, false, "entries", "inv", uid, []*v1alpha1.SinkExportStatus{
		entry("d", inv.Generation, 200), bad})
	if errs[0] != nil || !apierrors.IsInvalid(errs[1]) {
		t.Errorf("a valid and an invalid entry written together: %v; want nil and 422", errs)
	}
	got, err = invs.Get(ctx, "inv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, e := range got.Status.SinkExports {
		counts[e.Name] = e.ItemCount
	}
	if want := map[string]int64{"a": writes, "b": 100, "c": 100, "d": 200}; !maps.Equal(counts, want) {
		t.Errorf("item counts of the entries: %v, want %v", counts, want)
	}

	// Deleted, then created again under the same name.
	if err := invs.Delete(ctx, "inv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	finalize(ctx, t, invs, "inv")
	if err := write(uid, "a", 99); !apierrors.IsNotFound(err) {
		t.Errorf("a write for a deleted inventory: %v, want not found", err)
	}
	again, err := invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: refs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(uid, "a", 99); !apierrors.IsConflict(err) {
		t.Errorf("a write for the deleted inventory into its successor: %v, want a conflict", err)
	}
	if got, err := invs.Get(ctx, "inv", metav1.GetOptions{}); err != nil || len(got.Status.SinkExports) != 0 {
		t.Errorf("the successor's entries: %+v, %v; want none", got.Status.SinkExports, err)
	}
	if err := write(string(again.UID), "a", 1); err != nil {
		t.Errorf("a write for the successor: %v", err)
	}
}

func entry(sinkName string, generation int64, i int) *v1alpha1.SinkExportStatus {
	return &v1alpha1.SinkExportStatus{Family: v1alpha1.SinkFamilySnapshot, Name: sinkName, Namespace: "entries", ObservedGeneration: generation,
		Outcome: v1alpha1.OutcomeExported, ItemCount: int64(i), Cursor: fmt.Sprint(i)}
}

// updatesSince counts the updates of an inventory after resourceVersion
// rv, up to the one it holds now, from a watch, and returns that one too.
func updatesSince(ctx context.Context, t *testing.T, invs kollectv1alpha1.InventoryInterface, name, rv string) (int, string) {
	t.Helper()
	now, err := invs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := invs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n := 0
	for ev := range w.ResultChan() {
		obj, ok := ev.Object.(*v1alpha1.Inventory)
		if !ok {
			t.Fatalf("watch: %s %#v", ev.Type, ev.Object)
		}
		n++
		if obj.ResourceVersion == now.ResourceVersion {
			return n, now.ResourceVersion
		}
	}
	t.Fatalf("the watch ended after %d updates, before resourceVersion %s", n, now.ResourceVersion)
	return n, ""
}

func isTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
