package derive

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Minute))
	t2 = metav1.NewTime(t0.Add(2 * time.Minute))
	t9 = metav1.NewTime(t0.Add(time.Hour)) // the reference time of each derivation
)

func entry(family kollect.SinkFamily, name string, gen int64, outcome kollect.ExportOutcome, exported *metav1.Time) kollect.SinkExportStatus {
	return kollect.SinkExportStatus{Family: family, Name: name, ObservedGeneration: gen, Outcome: outcome, LastExportTime: exported, ItemCount: 7}
}

var threeRefs = []SinkRef{
	{Family: kollect.SinkFamilySnapshot, Name: "git"},
	{Family: kollect.SinkFamilyDatabase, Name: "pg"},
	{Family: kollect.SinkFamilyEvent, Name: "nats"},
}

type condWant struct {
	status metav1.ConditionStatus
	reason string
}

func TestInventoryStatus(t *testing.T) {
	tests := []struct {
		name        string
		generation  int64
		suspended   bool
		refs        []SinkRef
		entries     []kollect.SinkExportStatus
		wantSynced  condWant
		wantReady   condWant
		wantDegrade condWant
		wantEntries []string // family/name of the kept entries, in order
		wantSinks   string
		wantLast    *metav1.Time
	}{
		{
			name: "all sinks exported", generation: 3, refs: threeRefs,
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilyEvent, "nats", 3, kollect.OutcomeExported, &t2),
				entry(kollect.SinkFamilySnapshot, "git", 3, kollect.OutcomeDebounced, &t0),
				entry(kollect.SinkFamilyDatabase, "pg", 3, kollect.OutcomeExported, &t1),
			},
			wantSynced: condWant{metav1.ConditionTrue, kollect.ReasonExported}, wantReady: condWant{metav1.ConditionTrue, kollect.ReasonExported},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git", "Database/pg", "Event/nats"}, wantSinks: "3/3", wantLast: &t2,
		},
		{
			name: "one sink failed", generation: 3, refs: threeRefs,
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 3, kollect.OutcomeExported, &t1),
				entry(kollect.SinkFamilyDatabase, "pg", 3, kollect.OutcomeFailed, &t0),
				entry(kollect.SinkFamilyEvent, "nats", 3, kollect.OutcomeExported, &t1),
			},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonPartiallySynced}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonPartiallySynced},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git", "Database/pg", "Event/nats"}, wantSinks: "2/3", wantLast: &t1,
		},
		{
			name: "all sinks failed", generation: 3, refs: threeRefs,
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 3, kollect.OutcomeFailed, nil),
				entry(kollect.SinkFamilyDatabase, "pg", 3, kollect.OutcomeFailed, nil),
				entry(kollect.SinkFamilyEvent, "nats", 3, kollect.OutcomeFailed, &t0),
			},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonExportFailed}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonExportFailed},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git", "Database/pg", "Event/nats"}, wantSinks: "0/3", wantLast: &t0,
		},
		{
			name: "pending at an old generation", generation: 4, refs: threeRefs,
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 4, kollect.OutcomeExported, &t2),
				entry(kollect.SinkFamilyDatabase, "pg", 3, kollect.OutcomeExported, &t1),
				// A failure at the old generation is stale: the exporter has
				// not tried the new spec yet, so the sink is pending.
				entry(kollect.SinkFamilyEvent, "nats", 3, kollect.OutcomeFailed, nil),
			},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonProgressing}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonProgressing},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git", "Database/pg", "Event/nats"}, wantSinks: "1/3", wantLast: &t2,
		},
		{
			name: "a reference without any entry is pending", generation: 1, refs: threeRefs,
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 1, kollect.OutcomeExported, &t1),
			},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonProgressing}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonProgressing},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git"}, wantSinks: "1/3", wantLast: &t1,
		},
		{
			name: "removed ref drops its entry", generation: 5, refs: threeRefs[:2],
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 5, kollect.OutcomeExported, &t0),
				entry(kollect.SinkFamilyDatabase, "pg", 5, kollect.OutcomeExported, &t0),
				entry(kollect.SinkFamilyEvent, "nats", 4, kollect.OutcomeExported, &t2),
			},
			wantSynced: condWant{metav1.ConditionTrue, kollect.ReasonExported}, wantReady: condWant{metav1.ConditionTrue, kollect.ReasonExported},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git", "Database/pg"}, wantSinks: "2/2", wantLast: &t0,
		},
		{
			name: "no sinks", generation: 2, refs: nil,
			entries:    []kollect.SinkExportStatus{entry(kollect.SinkFamilyEvent, "nats", 1, kollect.OutcomeExported, &t2)},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonNoSinks}, wantReady: condWant{metav1.ConditionTrue, kollect.ReasonNoSinks},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: nil, wantSinks: "0/0", wantLast: nil,
		},
		{
			name: "forbidden sink degrades", generation: 2, refs: threeRefs[:2],
			entries: []kollect.SinkExportStatus{
				entry(kollect.SinkFamilySnapshot, "git", 2, kollect.OutcomeExported, &t1),
				{Family: kollect.SinkFamilyDatabase, Name: "pg", ObservedGeneration: 2, Outcome: kollect.OutcomeFailed, Reason: kollect.ReasonSinkForbidden, Message: "use denied"},
			},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonPartiallySynced}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonPartiallySynced},
			wantDegrade: condWant{metav1.ConditionTrue, kollect.ReasonSinkForbidden},
			wantEntries: []string{"Snapshot/git", "Database/pg"}, wantSinks: "1/2", wantLast: &t1,
		},
		{
			name: "suspended", generation: 2, suspended: true, refs: threeRefs[:1],
			entries:    []kollect.SinkExportStatus{entry(kollect.SinkFamilySnapshot, "git", 2, kollect.OutcomeExported, &t1)},
			wantSynced: condWant{metav1.ConditionFalse, kollect.ReasonSuspended}, wantReady: condWant{metav1.ConditionFalse, kollect.ReasonSuspended},
			wantDegrade: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			wantEntries: []string{"Snapshot/git"}, wantSinks: "1/1", wantLast: &t1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := InventoryStatus(tc.generation, tc.suspended, tc.refs, kollect.InventoryStatus{SinkExports: tc.entries}, t9)
			check := func(typ string, want condWant) {
				t.Helper()
				c := meta.FindStatusCondition(got.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition in %+v", typ, got.Conditions)
				}
				if c.Status != want.status || c.Reason != want.reason {
					t.Errorf("%s = %s/%s, want %s/%s (%s)", typ, c.Status, c.Reason, want.status, want.reason, c.Message)
				}
				if c.ObservedGeneration != tc.generation || !c.LastTransitionTime.Equal(&t9) {
					t.Errorf("%s observedGeneration/lastTransitionTime = %d/%v, want %d/%v", typ, c.ObservedGeneration, c.LastTransitionTime, tc.generation, t9)
				}
			}
			check(kollect.ConditionSynced, tc.wantSynced)
			check(kollect.ConditionReady, tc.wantReady)
			check(kollect.ConditionDegraded, tc.wantDegrade)

			var kept []string
			for _, e := range got.SinkExports {
				kept = append(kept, string(e.Family)+"/"+e.Name)
			}
			if diff := cmp.Diff(tc.wantEntries, kept); diff != "" {
				t.Errorf("kept entries (-want +got):\n%s", diff)
			}
			if got.SinksSynced != tc.wantSinks {
				t.Errorf("sinksSynced = %q, want %q", got.SinksSynced, tc.wantSinks)
			}
			if (tc.wantLast == nil) != (got.LastExportTime == nil) || (tc.wantLast != nil && !tc.wantLast.Equal(got.LastExportTime)) {
				t.Errorf("lastExportTime = %v, want %v", got.LastExportTime, tc.wantLast)
			}
			if got.ObservedGeneration != tc.generation {
				t.Errorf("observedGeneration = %d, want %d", got.ObservedGeneration, tc.generation)
			}
		})
	}
}

// A condition whose status does not change keeps its transition time; one
// that flips takes the new reference time.
func TestInventoryStatusTransitionTimes(t *testing.T) {
	refs := threeRefs[:1]
	first := InventoryStatus(1, false, refs, kollect.InventoryStatus{}, t0)
	if c := meta.FindStatusCondition(first.Conditions, kollect.ConditionSynced); c.Reason != kollect.ReasonProgressing || !c.LastTransitionTime.Equal(&t0) {
		t.Fatalf("initial Synced = %+v", c)
	}
	first.SinkExports = []kollect.SinkExportStatus{entry(kollect.SinkFamilySnapshot, "git", 1, kollect.OutcomeExported, &t1)}
	second := InventoryStatus(1, false, refs, first, t1)
	if c := meta.FindStatusCondition(second.Conditions, kollect.ConditionSynced); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
		t.Fatalf("Synced after export = %+v, want True at %v", c, t1)
	}
	third := InventoryStatus(1, false, refs, second, t2)
	if c := meta.FindStatusCondition(third.Conditions, kollect.ConditionSynced); !c.LastTransitionTime.Equal(&t1) {
		t.Fatalf("unchanged Synced moved its transition time to %v", c.LastTransitionTime)
	}
	if diff := cmp.Diff(second, third); diff != "" {
		t.Errorf("deriving twice from the same observations is not idempotent:\n%s", diff)
	}
}

func TestClusterInventoryRefsDefaultNamespace(t *testing.T) {
	spec := &kollect.ClusterInventorySpec{
		SinkNamespace:    "kollect-system",
		SnapshotSinkRefs: []kollect.SinkReference{{Name: "git-backup"}, {Name: "team-git", Namespace: "team-a"}},
	}
	got := ClusterInventoryRefs(spec)
	want := []SinkRef{
		{Family: kollect.SinkFamilySnapshot, Namespace: "kollect-system", Name: "git-backup"},
		{Family: kollect.SinkFamilySnapshot, Namespace: "team-a", Name: "team-git"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("refs (-want +got):\n%s", diff)
	}
	// An entry written for the sink's old namespace does not count.
	in := kollect.InventoryStatus{SinkExports: []kollect.SinkExportStatus{{Family: kollect.SinkFamilySnapshot, Namespace: "team-b", Name: "team-git", ObservedGeneration: 1, Outcome: kollect.OutcomeExported}}}
	out := InventoryStatus(1, false, got[1:], in, t0)
	if len(out.SinkExports) != 0 {
		t.Fatalf("entry of another namespace kept: %+v", out.SinkExports)
	}
}

func TestCollectionConditions(t *testing.T) {
	tests := []struct {
		name       string
		generation int64
		suspended  bool
		obs        *kollect.CollectionObservation
		ready      condWant
		degraded   condWant
	}{
		{"no report yet", 1, false, nil, condWant{metav1.ConditionFalse, kollect.ReasonPending}, condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{"report at old generation", 2, false, &kollect.CollectionObservation{ObservedGeneration: 1, ItemCount: 3}, condWant{metav1.ConditionFalse, kollect.ReasonPending}, condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{"collected", 2, false, &kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 3}, condWant{metav1.ConditionTrue, kollect.ReasonCollected}, condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{"some extraction failures", 2, false, &kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 3, FailedCount: 1, LastError: "replicas: no such key"}, condWant{metav1.ConditionTrue, kollect.ReasonCollected}, condWant{metav1.ConditionTrue, kollect.ReasonExtractionFailed}},
		{"kind not found", 2, false, &kollect.CollectionObservation{ObservedGeneration: 2, Reason: kollect.ReasonKindNotFound, LastError: "no kind Widget"}, condWant{metav1.ConditionFalse, kollect.ReasonKindNotFound}, condWant{metav1.ConditionTrue, kollect.ReasonKindNotFound}},
		{"suspended", 2, true, &kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 3}, condWant{metav1.ConditionFalse, kollect.ReasonSuspended}, condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds := CollectionConditions(tc.generation, tc.suspended, tc.obs, nil, t9)
			for typ, want := range map[string]condWant{kollect.ConditionReady: tc.ready, kollect.ConditionDegraded: tc.degraded} {
				c := meta.FindStatusCondition(conds, typ)
				if c == nil || c.Status != want.status || c.Reason != want.reason {
					t.Errorf("%s = %+v, want %s/%s", typ, c, want.status, want.reason)
				}
			}
		})
	}
}
