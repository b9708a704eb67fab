package export

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
)

// An inventory being deleted resolves to nothing to export: deletion bumps
// the generation, and an exporter that ran before the controller stopped
// it took the bump for a spec change and published a full resync of
// what the cleanup then deleted (seen in TestExportToAllSinks: 12 events
// after the deletion where 6 were due).
func TestResolveRefusesAnInventoryBeingDeleted(t *testing.T) {
	now := metav1.Now()
	inv := &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "inv", Generation: 3, DeletionTimestamp: &now,
			Finalizers: []string{Finalizer}},
		Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "changes"}}},
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(inv); err != nil {
		t.Fatal(err)
	}
	c := &Controller{inventories: kollectlisters.NewInventoryLister(idx)}
	k := exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: "changes"}
	cfg, err := c.resolve(t.Context(), k)
	if !errors.Is(err, errInventoryDeleting) || cfg != nil {
		t.Errorf("resolve of an inventory being deleted = %+v, %v; want %v", cfg, err, errInventoryDeleting)
	}
}
