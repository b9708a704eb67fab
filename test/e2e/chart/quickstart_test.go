package chart

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestQuickstart follows docs/quickstart.md after `helm install`: it applies
// the document's own YAML, as written, and finds the rows in the real
// PostgreSQL. The one change is the Secret's dsn: the guide's Postgres runs
// in a pod, and this cluster runs no pods, so the test points it at the
// machine's PostgreSQL (KOLLECT_TEST_POSTGRES_DSN).
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := os.Getenv("KOLLECT_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("PostgreSQL at KOLLECT_TEST_POSTGRES_DSN (%s): %v; make services starts it", dsn, err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, `DROP TABLE IF EXISTS public.deployments, public.deployments_cursors`); err != nil {
		t.Fatal(err)
	}

	doc, err := os.ReadFile(env.Path("docs/quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) != 1 {
		t.Fatalf("docs/quickstart.md has %d yaml blocks, want the one of step 3", len(blocks))
	}
	// Step 2, the objects only: a Deployment named postgres in demo.
	env.Kubectl(t, ctx, "create", "namespace", "demo")
	env.Kubectl(t, ctx, "-n", "demo", "create", "deployment", "postgres", "--image=postgres:17", "--port=5432")
	// Step 3, as written but for the dsn, replaced before anything reads it.
	const docDSN = "postgres://postgres:demo@postgres.demo.svc:5432/postgres?sslmode=disable"
	yamlDoc := string(blocks[0][1])
	if !strings.Contains(yamlDoc, "dsn: "+docDSN) {
		t.Fatalf("docs/quickstart.md's Secret no longer has dsn: %s; update this test with it", docDSN)
	}
	apply := env.Cluster.KubectlCmd(ctx, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Replace(yamlDoc, docDSN, dsn, 1))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply of the quickstart's YAML: %v\n%s", err, out)
	}

	// Step 4: the inventory reports 1/1 and 1 item, and the row is there.
	rows := func() []string {
		// The guide's query, per inventory.
		r, err := db.Query(ctx, `select source_name || ' ' || (attributes->'image')::text from public.deployments
			where inventory_namespace = 'demo' and inventory_name = 'portal' order by 1`)
		if err != nil {
			return nil // the exporter creates the table on its first export
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var s string
			if r.Scan(&s) == nil {
				out = append(out, s)
			}
		}
		return out
	}
	wait := func(what string, want []string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			got := rows()
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: rows %q, want %q\n%s", what, got, want,
					env.Kubectl(t, ctx, "-n", "demo", "get", "inventory", "portal", "-o", "yaml"))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	wait("first export", []string{`postgres ["postgres:17"]`})
	out := env.Kubectl(t, ctx, "-n", "demo", "get", "inventory", "portal")
	if !regexp.MustCompile(`portal\s+1/1\s+1\s+True`).MatchString(out) {
		t.Errorf("kubectl get inventory portal, want SINKS 1/1, ITEMS 1, SYNCED True:\n%s", out)
	}
	if items, err := env.KollectClient(t).KollectV1alpha1().InventoryItems("demo").List(ctx, metav1.ListOptions{}); err != nil || len(items.Items) != 1 {
		t.Errorf("kubectl -n demo get inventoryitems: %v, %d items; want 1", err, len(items.Items))
	}

	// "Create another Deployment ... a second row appears. Delete it and the row goes."
	env.Kubectl(t, ctx, "-n", "demo", "create", "deployment", "web", "--image=nginx:1.27")
	wait("after creating web", []string{`postgres ["postgres:17"]`, `web ["nginx:1.27"]`})
	env.Kubectl(t, ctx, "-n", "demo", "delete", "deployment", "web")
	wait("after deleting web", []string{`postgres ["postgres:17"]`})
}
