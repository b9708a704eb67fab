package kindmapper

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

var widget = schema.GroupKind{Group: "example.com", Kind: "Widget"}

func serveWidgets(dc *fakediscovery.FakeDiscovery) {
	dc.Resources = append(dc.Resources, &metav1.APIResourceList{GroupVersion: "example.com/v1",
		APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}}}})
}

// TestRefreshOnMiss: a kind installed after the cache was filled resolves
// on the next miss, but misses refresh discovery at most every
// refreshInterval, and Reset counts as a refresh.
func TestRefreshOnMiss(t *testing.T) {
	dc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	dc.Resources = []*metav1.APIResourceList{{GroupVersion: "v1",
		APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list"}}}}}
	m := New(dc)
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	if _, err := m.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
		t.Fatalf("Widget before it is served: %v, want no match", err)
	}

	serveWidgets(dc)
	if _, err := m.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("Widget within %s of the last refresh: %v, want no match from the cache", refreshInterval, err)
	}
	m.lastReset = time.Now().Add(-refreshInterval)
	mapping, err := m.RESTMapping(widget, "v1")
	if err != nil || mapping.Resource.Resource != "widgets" || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("Widget after the interval: %+v, %v, want widgets, namespaced", mapping, err)
	}

	// The resource goes: Reset drops it at once and holds off the next
	// refresh.
	dc.Resources = dc.Resources[:1]
	m.Reset()
	if _, err := m.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("Widget after Reset: %v, want no match", err)
	}
	serveWidgets(dc)
	if _, err := m.RESTMapping(widget, "v1"); !meta.IsNoMatchError(err) {
		t.Errorf("Widget right after Reset: %v, want no match from the cache", err)
	}
}
