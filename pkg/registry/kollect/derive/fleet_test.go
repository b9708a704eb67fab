package derive

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// expectConditions checks the status and reason of each condition in want,
// and that every message has each of the words in contains[type].
func expectConditions(t *testing.T, conds []metav1.Condition, want map[string]condWant, contains map[string][]string) {
	t.Helper()
	for typ, w := range want {
		c := meta.FindStatusCondition(conds, typ)
		if c == nil || c.Status != w.status || c.Reason != w.reason {
			t.Errorf("%s = %+v, want %s/%s", typ, c, w.status, w.reason)
			continue
		}
		for _, word := range contains[typ] {
			if !strings.Contains(c.Message, word) {
				t.Errorf("%s message %q lacks %q", typ, c.Message, word)
			}
		}
	}
}

func TestMemberConditions(t *testing.T) {
	since := t1
	tests := []struct {
		name      string
		suspended bool
		obs       *kollect.MemberObservation
		reachable condWant
		ready     condWant
		contains  map[string][]string
	}{
		{name: "no report yet", reachable: condWant{metav1.ConditionUnknown, kollect.ReasonPending}, ready: condWant{metav1.ConditionFalse, kollect.ReasonPending}},
		{name: "reachable", obs: &kollect.MemberObservation{ObservedGeneration: 2, Reachable: true, Owner: "kollect-0", ServerVersion: "v1.36.3", ItemCount: 40},
			reachable: condWant{metav1.ConditionTrue, kollect.ReasonReachable}, ready: condWant{metav1.ConditionTrue, kollect.ReasonCollecting},
			contains: map[string][]string{kollect.ConditionReachable: {"v1.36.3"}, kollect.ConditionReady: {"40 items", "kollect-0"}}},
		{name: "reachable, report at an older generation", obs: &kollect.MemberObservation{ObservedGeneration: 1, Reachable: true},
			reachable: condWant{metav1.ConditionTrue, kollect.ReasonReachable}, ready: condWant{metav1.ConditionFalse, kollect.ReasonPending}},
		{name: "unreachable without a class", obs: &kollect.MemberObservation{ObservedGeneration: 2, UnreachableSince: &since, LastError: "dial tcp 10.0.0.1:6443: i/o timeout"},
			reachable: condWant{metav1.ConditionFalse, kollect.ReasonUnreachable}, ready: condWant{metav1.ConditionFalse, kollect.ReasonUnreachable},
			contains: map[string][]string{
				kollect.ConditionReachable: {"i/o timeout", "since 2026-11-01T10:01:00Z"},
				kollect.ConditionReady:     {"i/o timeout", "since 2026-11-01T10:01:00Z"},
			}},
		{name: "TLS error", obs: &kollect.MemberObservation{ObservedGeneration: 2, ErrorClass: "TLSError", LastError: "x509: unknown authority", UnreachableSince: &since},
			reachable: condWant{metav1.ConditionFalse, "TLSError"}, ready: condWant{metav1.ConditionFalse, "TLSError"},
			contains: map[string][]string{kollect.ConditionReachable: {"x509", "since"}}},
		{name: "reachable, refused", obs: &kollect.MemberObservation{ObservedGeneration: 2, Reachable: true, ErrorClass: "Unauthorized", LastError: "401"},
			reachable: condWant{metav1.ConditionTrue, kollect.ReasonReachable}, ready: condWant{metav1.ConditionFalse, "Unauthorized"}},
		{name: "suspended", suspended: true, obs: &kollect.MemberObservation{ObservedGeneration: 2, Reachable: true},
			reachable: condWant{metav1.ConditionTrue, kollect.ReasonReachable}, ready: condWant{metav1.ConditionFalse, kollect.ReasonSuspended}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds := MemberConditions(2, tc.suspended, tc.obs, nil, t9)
			expectConditions(t, conds, map[string]condWant{kollect.ConditionReachable: tc.reachable, kollect.ConditionReady: tc.ready}, tc.contains)
			if errs := metav1validation.ValidateConditions(conds, field.NewPath("status", "conditions")); len(errs) > 0 {
				t.Errorf("derived conditions are invalid: %v", errs)
			}
		})
	}
}

func TestClusterTargetConditions(t *testing.T) {
	since := t1
	member := func(name string, gen, items int64, reason string) kollect.ClusterCollection {
		return kollect.ClusterCollection{Name: name, Collection: kollect.CollectionObservation{ObservedGeneration: gen, ItemCount: items, Reason: reason, LastError: strings.ToLower(reason)}}
	}
	host := &kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 5}
	tests := []struct {
		name     string
		fleet    bool
		obs      *kollect.CollectionObservation
		clusters []kollect.ClusterCollection
		ready    condWant
		degraded condWant
		contains map[string][]string
	}{
		{name: "host only, as a Target", obs: host, ready: condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{name: "members left over without a selector", obs: host, clusters: []kollect.ClusterCollection{member("east", 1, 0, "KindNotFound")},
			ready: condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{name: "fleet without any report", fleet: true, ready: condWant{metav1.ConditionFalse, kollect.ReasonPending}, degraded: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected}},
		{name: "fleet, all collected", fleet: true, clusters: []kollect.ClusterCollection{member("east", 2, 3, ""), member("west", 2, 4, "")},
			ready: condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			contains: map[string][]string{kollect.ConditionReady: {"7 items", "2 of 2"}}},
		{name: "fleet, a member behind", fleet: true, clusters: []kollect.ClusterCollection{member("east", 2, 3, ""), member("west", 1, 4, "")},
			ready: condWant{metav1.ConditionFalse, kollect.ReasonPending}, degraded: condWant{metav1.ConditionFalse, kollect.ReasonAsExpected},
			contains: map[string][]string{kollect.ConditionReady: {`member "west"`}}},
		{name: "fleet, a member unreachable", fleet: true,
			clusters: []kollect.ClusterCollection{member("east", 2, 3, ""), {Name: "west", Collection: kollect.CollectionObservation{ObservedGeneration: 1, LastError: "dial tcp: i/o timeout"}, UnreachableSince: &since}},
			ready:    condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionTrue, kollect.ReasonUnreachable},
			contains: map[string][]string{kollect.ConditionDegraded: {`member "west"`, "i/o timeout", "since 2026-11-01T10:01:00Z"}, kollect.ConditionReady: {"1 of 2"}}},
		{name: "fleet, a member's kind not found", fleet: true, obs: host, clusters: []kollect.ClusterCollection{member("east", 2, 0, kollect.ReasonKindNotFound), member("west", 2, 4, "")},
			ready: condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionTrue, kollect.ReasonKindNotFound},
			contains: map[string][]string{kollect.ConditionDegraded: {`member "east"`, "kindnotfound"}}},
		{name: "fleet, every member failing", fleet: true, clusters: []kollect.ClusterCollection{member("east", 2, 0, "TLSError"), member("west", 2, 0, "Unauthorized")},
			ready: condWant{metav1.ConditionFalse, "TLSError"}, degraded: condWant{metav1.ConditionTrue, "TLSError"},
			contains: map[string][]string{kollect.ConditionDegraded: {`member "east"`, `member "west"`}}},
		{name: "fleet, extraction failures on a member", fleet: true,
			clusters: []kollect.ClusterCollection{{Name: "east", Collection: kollect.CollectionObservation{ObservedGeneration: 2, ItemCount: 3, FailedCount: 2, LastError: "no such key"}}},
			ready:    condWant{metav1.ConditionTrue, kollect.ReasonCollected}, degraded: condWant{metav1.ConditionTrue, kollect.ReasonExtractionFailed},
			contains: map[string][]string{kollect.ConditionDegraded: {`member "east"`, "no such key"}}},
		{name: "fleet, host's blocking reason first", fleet: true, obs: &kollect.CollectionObservation{ObservedGeneration: 2, Reason: kollect.ReasonProfileNotFound},
			clusters: []kollect.ClusterCollection{member("east", 2, 0, "TLSError")},
			ready:    condWant{metav1.ConditionFalse, kollect.ReasonProfileNotFound}, degraded: condWant{metav1.ConditionTrue, kollect.ReasonProfileNotFound}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conds := ClusterTargetConditions(2, false, tc.fleet, tc.obs, tc.clusters, nil, t9)
			expectConditions(t, conds, map[string]condWant{kollect.ConditionReady: tc.ready, kollect.ConditionDegraded: tc.degraded}, tc.contains)
		})
	}
}

// FuzzFleetConditions: whatever the reports, the derived conditions are
// valid (a status write carrying them is not refused), the same derived
// again, and messages name at most a few members.
func FuzzFleetConditions(f *testing.F) {
	f.Add([]byte(`{"observedGeneration":2,"itemCount":3}`), []byte(`[{"name":"east","collection":{"reason":"TLSError","lastError":"x509"},"unreachableSince":"2026-01-01T00:00:00Z"}]`), int64(2), true, false)
	f.Add([]byte(`null`), []byte(`[]`), int64(1), false, true)
	f.Fuzz(func(t *testing.T, obsJSON, clustersJSON []byte, generation int64, fleet, suspended bool) {
		var obs *kollect.CollectionObservation
		var clusters []kollect.ClusterCollection
		var member *kollect.MemberObservation
		if json.Unmarshal(obsJSON, &obs) != nil || json.Unmarshal(clustersJSON, &clusters) != nil || len(clusters) > 1000 {
			return
		}
		_ = json.Unmarshal(obsJSON, &member)
		for i := range clusters {
			// What status validation lets through: bounded messages, CamelCase reasons.
			c := &clusters[i].Collection
			if len(c.LastError) > 4096 || (c.Reason != "" && !isCamel(c.Reason)) {
				return
			}
		}
		if obs != nil && (len(obs.LastError) > 4096 || (obs.Reason != "" && !isCamel(obs.Reason))) {
			return
		}
		if member != nil && (len(member.LastError) > 4096 || (member.ErrorClass != "" && !isCamel(member.ErrorClass))) {
			return
		}
		if generation < 0 {
			generation = -generation
		}
		conds := ClusterTargetConditions(generation, suspended, fleet, obs, clusters, nil, t9)
		again := ClusterTargetConditions(generation, suspended, fleet, obs, clusters, conds, t9)
		mconds := MemberConditions(generation, suspended, member, nil, t9)
		for _, cs := range [][]metav1.Condition{conds, mconds} {
			if errs := metav1validation.ValidateConditions(cs, field.NewPath("conditions")); len(errs) > 0 {
				t.Fatalf("invalid conditions %v: %v", cs, errs)
			}
		}
		a, _ := json.Marshal(conds)
		b, _ := json.Marshal(again)
		if string(a) != string(b) {
			t.Fatalf("not idempotent:\n%s\n%s", a, b)
		}
	})
}

// isCamel is what status validation accepts as a reason.
func isCamel(s string) bool {
	if len(s) > 63 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
