package collect

import (
	"strings"
	"testing"
)

func TestQueuedObject(t *testing.T) {
	k := objectKey{target: targetKey{Namespace: "ns", Name: "web"}, namespace: "ns", name: "a"}
	same := objectKey{target: targetKey{Namespace: "ns", Name: strings.Clone("web")}, namespace: strings.Clone("ns"), name: "a"}
	if k.queued() != same.queued() {
		t.Error("equal keys must queue as one")
	}
	if k.queued() == (objectKey{target: targetKey{Cluster: true, Name: "web"}, namespace: "ns", name: "a"}).queued() {
		t.Error("a ClusterTarget's key equals a Target's")
	}
	if k.queued().key() != k {
		t.Errorf("round trip: %+v", k.queued().key())
	}
	if got := k.queued().String(); got != "Target ns/web: ns/a" {
		t.Errorf("String() = %q", got)
	}
}
