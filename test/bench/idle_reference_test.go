package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/bench/load"
)

// The stock reference of the idle fleet: kube-apiserver serving, for a
// CRD of the same Inventory shape, the status writes a controller outside
// it would make at the fleet's nominal due rate, each changing one entry's
// times as a due re-export does. CPU per status write on this path is what
// the Kubernetes machinery costs on this machine today, with nothing of
// Kollect's in it: beside kollect-apiserver's it tells a slow machine from
// slow code. The two are not the same work: kollect-apiserver writes
// in-process and runs the exporters that make its writes; kube-apiserver
// pays a request per write and its client is not measured. It runs before
// the fleet exists, so that neither measurement shares the machine with
// the other's load.
type referenceFigures struct {
	window time.Duration
	rate   float64 // writes per second asked for
	writes float64 // MODIFIED events seen by the counting watch
	failed int64   // writes refused
	cpu    map[string]float64
	// rest is each process's CPU over a rest before the writes, in seconds
	// per second: what it spends with no writes.
	rest map[string]float64
}

// referenceSettle and referenceRest: after creating the objects, the
// reference lets the servers settle, then measures them at rest for longer
// than their longest periodic work (a minute).
const (
	referenceSettle = 10 * time.Second
	referenceRest   = 60 * time.Second
)

// perWrite is a process's CPU per write less its rest, in seconds; ok is
// false when there were no writes or the rest accounts for over half the
// CPU (the estimate would be mostly the rest's error).
func (r *referenceFigures) perWrite(name string) (float64, bool) {
	rest := r.rest[name] * r.window.Seconds()
	if r.writes == 0 || rest > r.cpu[name]/2 {
		return 0, false
	}
	return (r.cpu[name] - rest) / r.writes, true
}

// referenceNamespace names the reference's i-th namespace.
func referenceNamespace(i int) string { return fmt.Sprintf("bench-ref-%02d", i) }

// measureReference creates n objects of the CRD in namespaces of
// idlePerNamespace, each with the status entry of a working idle
// Inventory, then writes their status at rate (per second) for window,
// objects in turn, and deletes them. procs are the processes measured
// (kube-apiserver and its etcd).
func measureReference(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, procs []process, n int, rate float64, window time.Duration) (*referenceFigures, error) {
	if err := createInventoryCRD(ctx, dyn); err != nil {
		return nil, err
	}
	res := dyn.Resource(crdInventories)
	nsCount := (n + idlePerNamespace - 1) / idlePerNamespace
	for i := range nsCount {
		if err := createNamespace(ctx, kube, referenceNamespace(i)); err != nil {
			return nil, err
		}
	}
	objs := make([]*unstructured.Unstructured, n)
	since := time.Now() // the conditions' lastTransitionTime: they never change
	if _, err := load.Run(ctx, fmt.Sprintf("create %d CRD Inventories (stock reference)", n), 8, n, func(ctx context.Context, i int) error {
		u, err := referenceObject(i)
		if err != nil {
			return err
		}
		ri := res.Namespace(referenceNamespace(i / idlePerNamespace))
		if u, err = ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := setReferenceStatus(u, since, time.Now()); err != nil {
			return err
		}
		objs[i], err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return nil, err
	}

	l, err := res.List(ctx, metav1.ListOptions{LabelSelector: idleLabel, Limit: 1})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := res.Watch(wctx, metav1.ListOptions{LabelSelector: idleLabel, ResourceVersion: l.GetResourceVersion()})
	if err != nil {
		return nil, err
	}
	defer w.Stop()

	fig := &referenceFigures{window: window, rate: rate, cpu: map[string]float64{}, rest: map[string]float64{}}
	cpu0 := map[string]float64{}
	select {
	case <-time.After(referenceSettle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, p := range procs {
		if cpu0[p.name], err = cpuSeconds(p.pid); err != nil {
			return nil, err
		}
	}
	restStart := time.Now()
	select {
	case <-time.After(referenceRest):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rested := time.Since(restStart).Seconds()
	for _, p := range procs {
		c, err := cpuSeconds(p.pid)
		if err != nil {
			return nil, err
		}
		fig.rest[p.name] = (c - cpu0[p.name]) / rested
		cpu0[p.name] = c
	}
	// A pacer hands the next object to four writers at the rate; an object
	// comes round again only after n others, so no two writes of one object
	// overlap and each carries the resourceVersion its last write returned.
	pending := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range pending {
				ri := res.Namespace(referenceNamespace(i / idlePerNamespace))
				if err := writeReference(ctx, ri, objs, i, since); err != nil {
					mu.Lock()
					fig.failed++
					mu.Unlock()
				}
			}
		})
	}
	start := time.Now()
	total := int(rate * window.Seconds())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(pending)
		for k := range total {
			at := start.Add(time.Duration(float64(k) / rate * float64(time.Second)))
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				return
			}
			select {
			case pending <- k % n:
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(window)
	defer timer.Stop()
count:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("stock reference: the watch closed after %s", time.Since(start).Round(time.Second))
			}
			if ev.Type == watch.Modified {
				fig.writes++
			}
		case <-timer.C:
			break count
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	fig.window = time.Since(start)
	for _, p := range procs {
		c, err := cpuSeconds(p.pid)
		if err != nil {
			return nil, err
		}
		fig.cpu[p.name] = c - cpu0[p.name]
	}
	<-done
	wg.Wait()
	fmt.Fprintf(os.Stderr, "bench: stock reference: %.0f status writes in %s, %d refused\n", fig.writes, fig.window.Round(time.Second), fig.failed)
	// Unmeasured; a CRD's objects have no finalizers, so they go at once.
	// Their namespaces stay: without kube-controller-manager they would
	// stay Terminating.
	for i := range nsCount {
		ri := res.Namespace(referenceNamespace(i))
		if err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return nil, fmt.Errorf("stock reference: deleting the objects of %s: %w", referenceNamespace(i), err)
		}
		if l, err := ri.List(ctx, metav1.ListOptions{Limit: 1}); err != nil || len(l.Items) > 0 {
			return nil, fmt.Errorf("stock reference: objects left in %s (%v)", referenceNamespace(i), err)
		}
	}
	return fig, nil
}

// writeReference makes one due write of object i. A write that fails
// (timed out, perhaps committed) leaves the object re-read, so that the
// next write carries its current resourceVersion; an object comes round
// only after every other, well after the timeout.
func writeReference(ctx context.Context, ri dynamic.ResourceInterface, objs []*unstructured.Unstructured, i int, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := objs[i]
	if err := setReferenceStatus(u, since, time.Now()); err != nil {
		return err
	}
	u, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err == nil {
		objs[i] = u
		return nil
	}
	// A fresh deadline: the write may have spent the first.
	gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer gcancel()
	if cur, gerr := ri.Get(gctx, objs[i].GetName(), metav1.GetOptions{}); gerr == nil {
		objs[i] = cur
	}
	return err
}

// referenceObject is the CRD's i-th object: a working idle Inventory's
// spec and labels.
func referenceObject(i int) (*unstructured.Unstructured, error) {
	inv := idleInventory(2 * i) // even: the working shape, one snapshot sink
	inv.Name = objName(i)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(inv)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(crdInventories.GroupVersion().String())
	u.SetKind("Inventory")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// setReferenceStatus sets what a due re-export writes: the working entry,
// its times at; the conditions, unchanged since.
func setReferenceStatus(u *unstructured.Unstructured, since, at time.Time) error {
	now := metav1.NewTime(at.UTC().Truncate(time.Second))
	then := metav1.NewTime(since.UTC().Truncate(time.Second))
	next := metav1.NewTime(now.Add(defaultWatchdog))
	interval := &metav1.Duration{Duration: defaultWatchdog}
	status := v1alpha1.InventoryStatus{
		ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, ObservedGeneration: 1, LastTransitionTime: then, Reason: v1alpha1.ReasonAsExpected, Message: "every sink reference resolves"},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: then, Reason: v1alpha1.ReasonExported, Message: "all 1 sinks hold the current inventory"},
			{Type: v1alpha1.ConditionSynced, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: then, Reason: v1alpha1.ReasonExported, Message: "all 1 sinks hold the current inventory"},
		},
		SinkExports: []v1alpha1.SinkExportStatus{{
			Family: v1alpha1.SinkFamilySnapshot, Name: idleFileSink, ObservedGeneration: 1, Outcome: v1alpha1.OutcomeExported,
			Message: fmt.Sprintf("exported %d items", idleConfigMaps), LastExportTime: &now, LastAttemptTime: &now,
			LastChecksum: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			ItemCount:    idleConfigMaps, EffectiveInterval: interval, NextDueTime: &next,
		}},
		LastExportTime: &now,
		ItemCount:      idleConfigMaps,
		SinksSynced:    "1/1",
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return err
	}
	u.Object["status"] = m
	return nil
}
