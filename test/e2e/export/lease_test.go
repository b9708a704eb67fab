package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/leader"
)

// TestEpochAfterTheLeaseIsRecreated: Kollect reinstalled (the Lease
// deleted, the server restarted) against a database an earlier term
// wrote. The new leader's epoch must be newer than the stored one, or
// Postgres refuses every batch as a former leader's (a Lease created
// again starts its transitions count at 0).
func TestEpochAfterTheLeaseIsRecreated(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	ns := "export-lease"
	namespace(ctx, t, ns)
	collectDeployments(ctx, t, ns, 2)
	schema := pgSchema(t, "e2e_lease")
	secret(ctx, t, ns, "db", map[string]string{"dsn": postgresDSN})
	api := kollect.KollectV1alpha1()
	_, err := api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, SecretRef: &v1alpha1.LocalObjectReference{Name: "db"},
			Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema, Table: "inventory"}},
	}, metav1.CreateOptions{})
	must(t, err, "database sink")
	_, err = api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: 0},
			DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "portal"}}},
	}, metav1.CreateOptions{})
	must(t, err, "inventory")

	epoch := func(ctx context.Context) (int64, error) {
		var e int64
		err := pg.QueryRow(ctx, "SELECT epoch FROM "+pgx.Identifier{schema, "inventory_cursors"}.Sanitize()+
			" WHERE inventory_namespace = $1 AND inventory_name = $2", ns, "inv").Scan(&e)
		return e, err
	}
	rowsMatch := func(ctx context.Context) (bool, string) {
		set, sum := itemSet(ctx, t, ns)
		rows, err := pgRows(ctx, schema, "inventory", ns, "inv")
		if err != nil {
			return false, err.Error()
		}
		if len(rows) != len(set) || checksumOfRows(rows) != sum {
			return false, fmt.Sprintf("%d rows, want %d", len(rows), len(set))
		}
		return true, ""
	}
	eventually(ctx, t, "the rows are exported", rowsMatch)
	before, err := epoch(ctx)
	must(t, err, "the stored epoch")

	// Reinstall: the server stops, its Lease is deleted, a server starts.
	p := cluster.Kollect()
	must(t, p.Kill(), "stop kollect-apiserver")
	err = kube.CoordinationV1().Leases("kollect-system").Delete(ctx, leader.LeaseName, metav1.DeleteOptions{})
	must(t, err, "delete the Lease")
	must(t, p.Start(ctx), "start kollect-apiserver")
	must(t, cluster.RegisterKollect(ctx, p), "register kollect-apiserver")

	setImage(ctx, t, ns, "app-00", "registry.example/app:reinstalled")
	// The rows match the items at once, before the new collector has seen
	// the change: wait for a batch of the new leader's, which stores its
	// epoch (the old one's stays when every batch is refused).
	eventually(ctx, t, "the change reaches Postgres after the reinstall", func(ctx context.Context) (bool, string) {
		if ok, why := rowsMatch(ctx); !ok {
			return false, why
		}
		if e, err := epoch(ctx); err != nil || e == before {
			return false, fmt.Sprintf("the stored epoch is still %d (%v)", before, err)
		}
		return true, ""
	})
	after, err := epoch(ctx)
	must(t, err, "the stored epoch")
	if after <= before {
		t.Errorf("the epoch went from %d to %d after the Lease was recreated", before, after)
	}
	e := entry(getInventory(ctx, t, ns, "inv"), v1alpha1.SinkFamilyDatabase, "portal")
	if e == nil || e.Outcome != v1alpha1.OutcomeExported {
		t.Errorf("the entry after the reinstall: %+v", e)
	}
	t.Logf("epoch %d before the Lease was recreated, %d after", before, after)
}
