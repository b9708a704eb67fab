package collect

import (
	"bytes"
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/extract"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/itemstore"
)

// A hub runs one collector per cluster: the host's, and one per
// MemberCluster it owns. They share the item stores, so each keeps to its
// own cluster's items (scopedItems) and names them apart (itemName).

// serves says whether this collector collects for a target: the host's
// for Targets and the ClusterTargets without a clusterSelector, a
// member's for the ClusterTargets whose clusterSelector selects its
// MemberCluster.
func (c *Collector) serves(v *targetObject) bool {
	if c.cfg.Member == nil {
		return !v.key.Cluster || v.clusterSelector == nil
	}
	if !v.key.Cluster || v.clusterSelector == nil {
		return false
	}
	m, err := c.memberLister.Get(c.cfg.Cluster)
	if err != nil || m.DeletionTimestamp != nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(v.clusterSelector)
	return err == nil && sel.Matches(labels.Set(m.Labels))
}

// memberSuspended says whether this member's MemberCluster is suspended:
// its targets keep their items and collect nothing.
func (c *Collector) memberSuspended() bool {
	if c.cfg.Member == nil {
		return false
	}
	m, err := c.memberLister.Get(c.cfg.Cluster)
	return err == nil && m.Spec.Suspend
}

// memberEvent syncs every ClusterTarget again when this member's labels or
// suspension change: they decide which ClusterTargets it collects for.
func (c *Collector) memberEvent(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*v1alpha1.MemberCluster)
	if !ok || m.Name != c.cfg.Cluster {
		return
	}
	cts, err := c.clusterTargetLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, t := range cts {
		c.targetQueue.Add(targetKey{Cluster: true, Name: t.Name})
	}
}

// RequeueStatuses reports every target again: the member's reachability
// changed, which status.clusters shows.
func (c *Collector) RequeueStatuses() {
	for _, key := range c.targets.keys() {
		c.statusQueue.Add(key)
	}
}

// unreachableSince is since when the member has not answered; zero while
// it answers, and always for the host.
func (c *Collector) unreachableSince() time.Time {
	if c.cfg.Member == nil || c.cfg.Member.UnreachableSince == nil {
		return time.Time{}
	}
	return c.cfg.Member.UnreachableSince()
}

// leave stops collecting for a target this collector does not serve
// (another cluster's, or a member no longer selected) and deletes the
// items it collected for it, then withdraws what it reported.
func (c *Collector) leave(ctx context.Context, key targetKey, v *targetObject) error {
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	c.informers.release(ctx, key)
	c.walks.stop(key)
	t, known := c.targets.get(key)
	c.targets.remove(key)
	if c.index.remove(key) {
		if err := c.deleteAllItems(ctx, key); err != nil {
			return err
		}
	}
	if (known && t.reported != nil) || c.reportedBefore(v) {
		return c.withdrawStatus(ctx, key)
	}
	return nil
}

// reportedBefore says whether the target's status holds this collector's
// report, from an earlier run.
func (c *Collector) reportedBefore(v *targetObject) bool {
	if c.cfg.Member == nil {
		return v.collection != nil
	}
	for _, name := range v.clusters {
		if name == c.cfg.Cluster {
			return true
		}
	}
	return false
}

// withdrawStatus removes this collector's report from a ClusterTarget's
// status: server-side apply of nothing under its field manager drops the
// fields only it owned.
func (c *Collector) withdrawStatus(ctx context.Context, key targetKey) error {
	if !key.Cluster {
		return nil
	}
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	_, err := c.kollect.KollectV1alpha1().ClusterTargets().ApplyStatus(ctx,
		applyv1alpha1.ClusterTarget(key.Name).WithStatus(applyv1alpha1.ClusterTargetStatus()),
		metav1.ApplyOptions{FieldManager: c.fieldManager(), Force: true})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// fieldManager is the field manager of this collector's status writes: a
// member's own, so that the members' reports in status.clusters merge.
func (c *Collector) fieldManager() string {
	if c.cfg.Member == nil {
		return fieldManager
	}
	return MemberFieldManager(c.cfg.Cluster)
}

// MemberFieldManager is the field manager of a member's entries in the
// ClusterTargets' status.clusters: the fleet controller withdraws them, or
// marks them unreachable, under it when the member's collector cannot.
func MemberFieldManager(member string) string { return fieldManager + "-" + member }

// scopedItems is an item store seen by one cluster's collector: lists and
// watches show only that cluster's items (for the host, also items stored
// before items named their cluster), so that no collector takes another's
// items for stale ones.
type scopedItems struct {
	itemStore
	cluster string
	host    bool
}

func (s scopedItems) mine(st storedItem) bool {
	return st.cluster == s.cluster || (s.host && st.cluster == "")
}

func (s scopedItems) get(ctx context.Context, namespace, name string) (storedItem, bool, error) {
	st, found, err := s.itemStore.get(ctx, namespace, name)
	if err != nil || !found || !s.mine(st) {
		return storedItem{}, false, err
	}
	return st, true, nil
}

func (s scopedItems) list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error {
	return s.itemStore.list(ctx, namespace, selector, func(st storedItem) {
		if s.mine(st) {
			fn(st)
		}
	})
}

func (s scopedItems) watch(ctx context.Context, rv uint64) <-chan itemstore.Event {
	in := s.itemStore.watch(ctx, rv)
	out := make(chan itemstore.Event)
	go func() {
		defer close(out)
		for ev := range in {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				// Own writes carry no content; a deletion etcd kept no
				// content of names no cluster: both pass as they are.
				if !ev.Own && !s.mine(storedOf(ev.Item)) {
					continue
				}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// itemName names an object's item. The host's items keep the names they
// had before members existed (an upgrade renames nothing); a member's hash
// the member's name with the object's uid, so that names stay unique
// across clusters, even for objects restored with their uid elsewhere.
func (c *Collector) itemName(target string, src kollect.ItemSource) string {
	if c.cfg.Member == nil {
		return extract.ItemName(target, src)
	}
	id := src
	id.UID = types.UID(c.cfg.Cluster + "/" + string(src.UID))
	return extract.ItemName(target, id)
}

// selectableOf lists a Profile's selectable attributes, sorted.
func selectableOf(p *v1alpha1.Profile) []string {
	var out []string
	for _, a := range p.Spec.Attributes {
		if a.Selectable {
			out = append(out, a.Name)
		}
	}
	slices.Sort(out)
	return out
}

// selectableIn are the selectable attributes an item can be selected by:
// those with a string, number or boolean value.
func selectableIn(selectable []string, attributes map[string]kollect.Value) []string {
	var out []string
	for _, name := range selectable {
		if v, ok := attributes[name]; ok && scalar(v.Raw) {
			out = append(out, name)
		}
	}
	return out
}

// scalar says whether raw JSON is a string, number or boolean.
func scalar(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch raw[0] {
	case '{', '[', 'n':
		return false
	}
	return true
}

// ItemCount is how many items this collector holds, over all its targets.
func (c *Collector) ItemCount() int64 {
	var n int64
	for _, key := range c.index.keys() {
		n += c.index.counts(key).items
	}
	return n
}

// fencedItems refuses item writes while this replica's Lease is not
// confirmed (Config.Holding), checked at the write itself: the check at
// the start of a sync does not cover a replica paused in the middle of one.
type fencedItems struct {
	itemStore
	holding func() bool
}

func (s fencedItems) put(ctx context.Context, item *desiredItem, exists bool) (bool, uint64, error) {
	if s.holding != nil && !s.holding() {
		return false, 0, errLeaseUnconfirmed
	}
	return s.itemStore.put(ctx, item, exists)
}

func (s fencedItems) delete(ctx context.Context, namespace, name string) error {
	if s.holding != nil && !s.holding() {
		return errLeaseUnconfirmed
	}
	return s.itemStore.delete(ctx, namespace, name)
}
