package apiserver_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/controllers/informers"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
)

// TestInProcessInformers: informers reading the server in process list
// what exists, follow creates, updates and deletes in every namespace, and
// hold copies: changing an informer's object changes nothing the server
// serves. The factory's client is never used for those kinds (nil here).
func TestInProcessInformers(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.Inventories("a").Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "before",
		Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	f := kollectinformers.NewSharedInformerFactory(nil, 0)
	informers.InProcess(f, srv.API.ListWatches, &v1alpha1.Inventory{}, &v1alpha1.Scope{})
	inf := f.Kollect().V1alpha1().Inventories()
	lister := inf.Lister()
	var mu sync.Mutex
	var events []string
	record := func(what string, obj any) {
		mu.Lock()
		defer mu.Unlock()
		if o, ok := obj.(*v1alpha1.Inventory); ok {
			events = append(events, what+" "+o.Namespace+"/"+o.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			record("delete", obj)
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	defer f.Shutdown()
	defer close(stop)
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}

	created, err := api.Inventories("b").Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Spec.Suspend = true
	if _, err := api.Inventories("b").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := api.Inventories("b").Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	finalize(ctx, t, api.Inventories("b"), "after")
	// The update setting the deletion timestamp and the one removing the
	// finalizer may come as one or two.
	want := []string{"add a/before", "add b/after", "update b/after", "update b/after", "delete b/after"}
	var got []string
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		got = slices.Clone(events)
		return len(got) > 0 && got[len(got)-1] == "delete b/after", nil
	})
	if !slices.Equal(got, want) && !slices.Equal(got, slices.Delete(slices.Clone(want), 3, 4)) {
		t.Errorf("events %q, want %q (one or two updates before the delete)", got, want)
	}

	// Copies: the informer's object is its own.
	before, err := lister.Inventories("a").Get("before")
	if err != nil {
		t.Fatal(err)
	}
	before.Labels["team"] = "changed"
	before.Spec.Suspend = true
	// Served from the watch cache, whose objects the informer was fed from.
	served, err := api.Inventories("a").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(served.Items) != 1 {
		t.Fatalf("list: %v, %v", served, err)
	}
	if s := served.Items[0]; s.Labels["team"] != "a" || s.Spec.Suspend {
		t.Errorf("the server serves %v / suspend %v after the informer's copy changed", s.Labels, s.Spec.Suspend)
	}
	if l, err := lister.List(labels.Everything()); err != nil || len(l) != 1 {
		t.Errorf("lister: %d inventories, %v; want 1", len(l), err)
	}
}

// relays counts the goroutines relaying in-process watches (watch.Filter's
// too, which this relay replaced).
func relays() int {
	buf := make([]byte, 1<<22)
	stacks := string(buf[:goruntime.Stack(buf, true)])
	return strings.Count(stacks, "apiserver.(*externalWatch).relay") + strings.Count(stacks, "watch.(*filteredWatch).loop")
}

// TestInProcessWatchStop: a reader that stops a watch and reads no more
// (an informer shutting down, a leader losing its lease) leaves no relay
// behind, even with an event in flight. (Found by the adversarial review:
// watch.Filter's relay blocked on its send for good.)
func TestInProcessWatchStop(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	lw := srv.API.ListWatches.ListWatch(&v1alpha1.Inventory{}).(cache.ListerWatcherWithContext)
	before := relays()
	const watches = 5
	for i := range watches {
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.Inventories("stop").Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return relays() <= before, nil
	})
	if err != nil {
		t.Errorf("%d in-process watch relays still running after Stop", relays()-before)
	}
}
