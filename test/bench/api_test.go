package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/test/bench/load"
)

// BenchmarkInProcessAPI is the baseline later work is compared with:
// create, get, list and status-update throughput and latency of
// kollect-apiserver in process against its embedded etcd (fsync on), at 1,
// 8 and 64 concurrent clients. It prints a table and asserts nothing.
func BenchmarkInProcessAPI(b *testing.B) {
	srv := testserver.Start(b, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	client := srv.Client.KollectV1alpha1()
	const (
		perLevel  = 1000 // objects created, read and status-updated per concurrency level
		listSize  = 1000 // objects in the listed namespace
		listCalls = 50
	)
	inventory := func(ns string, i int) *v1alpha1.Inventory {
		return &v1alpha1.Inventory{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inv-%05d", i), Namespace: ns},
			Spec: v1alpha1.InventorySpec{
				ExportMinInterval: &metav1.Duration{Duration: 30 * time.Second},
				SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "audit"}},
				DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
			},
		}
	}
	var results []load.Result
	record := func(r load.Result, err error) {
		if err != nil {
			b.Fatalf("%v", err)
		}
		results = append(results, r)
	}
	for _, c := range []int{1, 8, 64} {
		ns := fmt.Sprintf("bench-c%d", c)
		invs := client.Inventories(ns)
		record(load.Run(ctx, "create", c, perLevel, func(ctx context.Context, i int) error {
			_, err := invs.Create(ctx, inventory(ns, i), metav1.CreateOptions{})
			return err
		}))
		record(load.Run(ctx, "get", c, perLevel, func(ctx context.Context, i int) error {
			_, err := invs.Get(ctx, fmt.Sprintf("inv-%05d", i), metav1.GetOptions{})
			return err
		}))
		record(load.Run(ctx, fmt.Sprintf("list %d", listSize), c, listCalls, func(ctx context.Context, _ int) error {
			l, err := invs.List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) != listSize {
				err = fmt.Errorf("listed %d, want %d", len(l.Items), listSize)
			}
			return err
		}))
		now := metav1.Now()
		record(load.Run(ctx, "update-status", c, perLevel, func(ctx context.Context, i int) error {
			inv := inventory(ns, i)
			inv.Status.SinkExports = []v1alpha1.SinkExportStatus{
				{Family: v1alpha1.SinkFamilySnapshot, Name: "audit", ObservedGeneration: 1, Outcome: v1alpha1.OutcomeExported, LastExportTime: &now},
			}
			got, err := invs.Get(ctx, inv.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Status.SinkExports = inv.Status.SinkExports
			_, err = invs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		}))
	}
	load.PrintTable(os.Stdout, "kollect-apiserver in process, embedded etcd (update-status includes its GET)",
		load.Conditions("transport=HTTPS loopback", "etcd=embedded single member, fsync on"), results)
}
