package export

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// TestOpenBreakerClosesOnFlakyReceiver: a receiver that answers 503 to one
// POST in 25 (a blip its sender's retries mask) gets everything owed in one
// run, breaker open or not: the probe is one attempt, and once the receiver
// accepted an event the run retries as usual. (Found by the adversarial
// review: with one attempt per event every resync failed at the 25th POST
// and the breaker never closed.)
func TestOpenBreakerClosesOnFlakyReceiver(t *testing.T) {
	for _, failures := range []int{0, breakerThreshold} {
		t.Run("failures="+strconv.Itoa(failures), func(t *testing.T) {
			ctx := reviewCtx(t)
			var posts, ok atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					return
				}
				if posts.Add(1)%25 == 0 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				ok.Add(1)
			}))
			defer srv.Close()
			obj, err := sinkObjectOf(&v1alpha1.EventSink{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hook", UID: "sink-uid", Generation: 1},
				Spec:       v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: srv.URL + "/"},
			})
			if err != nil {
				t.Fatal(err)
			}
			inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
			h := &reviewHost{inv: inv, obj: obj, maxAge: time.Hour}
			v := newItemSet(func() string { return "1" })
			for i := range 100 {
				v.upsert(exported(reviewItem(strconv.Itoa(i), "uid-"+strconv.Itoa(i), "1", "h"+strconv.Itoa(i))))
			}
			e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: "hook"}, v)
			defer func() { e.sub.close(); e.closeClient() }()
			e.failures = failures // the breaker opened during an outage now over
			var outcomes []v1alpha1.ExportOutcome
			for run := 0; run < 6; run++ {
				e.runOnce(ctx)
				last := h.entries[len(h.entries)-1]
				outcomes = append(outcomes, last.Outcome)
				if last.Outcome == v1alpha1.OutcomeExported {
					break
				}
			}
			t.Logf("breaker failures at start %d: runs %v; %d POSTs, %d accepted (live set: 100 items + resync)", failures, outcomes, posts.Load(), ok.Load())
			if outcomes[len(outcomes)-1] != v1alpha1.OutcomeExported {
				t.Errorf("the receiver never got everything owed after %d runs: %v", len(outcomes), outcomes)
			}
		})
	}
}

// TestTwoSinksOneTable: two exporters of one inventory in one process (two
// DatabaseSinks naming the same table, one epoch) both read back an empty
// table and both COPY their upserts in as Absent: the second merges instead
// of failing. (Found by the adversarial review: 8 of 10 first exports failed
// with 23505, a spurious ExportFailed and Warning Event.)
func TestTwoSinksOneTable(t *testing.T) {
	ctx := reviewCtx(t)
	a, ds, schema := reviewPostgresSchema(ctx, t)
	ds2, err := sink.Databases.Build(ctx, string(v1alpha1.DatabaseSinkPostgres), &v1alpha1.DatabaseSinkSpec{
		Type: v1alpha1.DatabaseSinkPostgres, Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema},
	}, sink.Params{Secret: sink.Secret{"dsn": []byte(reviewDSN())}, Dialer: reviewDialer(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ds2.Close()
	b := &databaseAdapter{s: ds2}
	for trial := range 10 {
		inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv" + strconv.Itoa(trial)}
		errs := make(chan error, 2)
		for _, d := range []*databaseAdapter{a, b} {
			v := newItemSet(func() string { return "1" })
			for i := range 300 {
				v.upsert(exported(reviewItem(strconv.Itoa(i), "uid-"+strconv.Itoa(i), "1", "h"+strconv.Itoa(i))))
			}
			s := v.subscribe()
			go func() { errs <- exportOnce(ctx, d, s, inv, false, 1) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("trial %d: %v", trial, err)
			}
		}
		if held, _, err := ds.State(ctx, inv); err != nil || len(held) != 300 {
			t.Errorf("trial %d: %d rows (%v), want 300", trial, len(held), err)
		}
	}
}
