package derive

import (
	"encoding/json"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// FuzzInventoryStatus feeds arbitrary specs and statuses to the rule: it
// must not panic, must keep only referenced entries, and must be idempotent.
func FuzzInventoryStatus(f *testing.F) {
	f.Add([]byte(`{"snapshotSinkRefs":[{"name":"a"}],"eventSinkRefs":[{"name":"b"}]}`),
		[]byte(`{"sinkExports":[{"family":"Snapshot","name":"a","observedGeneration":1,"outcome":"Exported"},{"family":"Event","name":"zz","outcome":"Failed"}]}`), int64(1), false)
	f.Add([]byte(`{}`), []byte(`{"conditions":[{"type":"Synced","status":"True"}]}`), int64(0), true)
	f.Fuzz(func(t *testing.T, specJSON, statusJSON []byte, generation int64, suspended bool) {
		var spec kollect.InventorySpec
		var status kollect.InventoryStatus
		if json.Unmarshal(specJSON, &spec) != nil || json.Unmarshal(statusJSON, &status) != nil {
			return
		}
		refs := InventoryRefs(&spec)
		out := InventoryStatus(generation, suspended, refs, status, t9)
		if len(out.SinkExports) > len(refs) {
			t.Fatalf("%d entries kept for %d refs", len(out.SinkExports), len(refs))
		}
		for _, e := range out.SinkExports {
			found := false
			for _, r := range refs {
				found = found || (r.Family == e.Family && r.Name == e.Name)
			}
			if !found {
				t.Fatalf("entry %s/%s kept without a reference", e.Family, e.Name)
			}
		}
		again := InventoryStatus(generation, suspended, refs, out, t9)
		a, _ := json.Marshal(out)
		b, _ := json.Marshal(again)
		if string(a) != string(b) {
			t.Fatalf("not idempotent:\n%s\n%s", a, b)
		}
	})
}
