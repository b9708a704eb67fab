package export

import (
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// inventoryKeyOf is the key of an Inventory or a ClusterInventory.
func inventoryKeyOf(obj metav1.Object) plumbing.InventoryKey {
	_, cluster := obj.(*v1alpha1.ClusterInventory)
	return plumbing.InventoryKey{Cluster: cluster, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// getInventory reads an inventory from the cache; nil when it is gone.
func (c *Controller) getInventory(k plumbing.InventoryKey) (metav1.Object, error) {
	var obj metav1.Object
	var err error
	if k.Cluster {
		obj, err = c.clusterInventories.Get(k.Name)
	} else {
		obj, err = c.inventories.Inventories(k.Namespace).Get(k.Name)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// inventory is what the controller reads of either inventory kind.
type inventory struct {
	meta       *metav1.ObjectMeta
	generation int64
	suspend    bool
	interval   *time.Duration
	refs       []sinkRef
	status     *v1alpha1.InventoryStatus
	// selector returns whether a target (by name and labels) is exported.
	// It parses the label selector on first use: most readers of an inventory
	// (an exporter's run, a create's first entries) match no target, and
	// the parse cost more than the rest of inventoryOf together.
	selector func() (func(name string, lbls map[string]string) bool, error)
}

type sinkRef struct {
	family          v1alpha1.SinkFamily
	namespace, name string
	interval        *time.Duration
}

func durationPtr(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.Duration
	return &v
}

func inventoryOf(obj metav1.Object) (*inventory, error) {
	out := &inventory{}
	addRefs := func(family v1alpha1.SinkFamily, refs []v1alpha1.SinkReference, defaultNS string) {
		for _, r := range refs {
			ns := r.Namespace
			if ns == "" {
				ns = defaultNS
			}
			out.refs = append(out.refs, sinkRef{family: family, namespace: ns, name: r.Name, interval: durationPtr(r.ExportMinInterval)})
		}
	}
	switch o := obj.(type) {
	case *v1alpha1.Inventory:
		out.meta, out.generation, out.suspend, out.status = &o.ObjectMeta, o.Generation, o.Spec.Suspend, &o.Status
		out.interval = durationPtr(o.Spec.ExportMinInterval)
		addRefs(v1alpha1.SinkFamilySnapshot, o.Spec.SnapshotSinkRefs, o.Namespace)
		addRefs(v1alpha1.SinkFamilyDatabase, o.Spec.DatabaseSinkRefs, o.Namespace)
		addRefs(v1alpha1.SinkFamilyEvent, o.Spec.EventSinkRefs, o.Namespace)
		ls := o.Spec.TargetSelector
		out.selector = sync.OnceValues(func() (func(string, map[string]string) bool, error) {
			sel, err := parseSelector(ls)
			if err != nil {
				return nil, err
			}
			if sel == nil {
				sel = labels.Everything()
			}
			return func(_ string, l map[string]string) bool { return sel.Matches(labels.Set(l)) }, nil
		})
	case *v1alpha1.ClusterInventory:
		out.meta, out.generation, out.suspend, out.status = &o.ObjectMeta, o.Generation, o.Spec.Suspend, &o.Status
		out.interval = durationPtr(o.Spec.ExportMinInterval)
		sinkNS := o.Spec.SinkNamespace
		if sinkNS == "" {
			sinkNS = v1alpha1.DefaultSinkNamespace
		}
		addRefs(v1alpha1.SinkFamilySnapshot, o.Spec.SnapshotSinkRefs, sinkNS)
		addRefs(v1alpha1.SinkFamilyDatabase, o.Spec.DatabaseSinkRefs, sinkNS)
		addRefs(v1alpha1.SinkFamilyEvent, o.Spec.EventSinkRefs, sinkNS)
		names := map[string]bool{}
		for _, r := range o.Spec.TargetRefs {
			names[r.Name] = true
		}
		ls := o.Spec.TargetSelector
		out.selector = sync.OnceValues(func() (func(string, map[string]string) bool, error) {
			sel, err := parseSelector(ls)
			if err != nil {
				return nil, err
			}
			all := len(names) == 0 && sel == nil
			return func(name string, l map[string]string) bool {
				return all || names[name] || (sel != nil && sel.Matches(labels.Set(l)))
			}, nil
		})
	default:
		return nil, fmt.Errorf("unexpected inventory type %T", obj)
	}
	return out, nil
}

// parseSelector parses a target selector; nil when there is none.
func parseSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

// selectedTargets names the targets the inventory key exports.
func (c *Controller) selectedTargets(key plumbing.InventoryKey, inv *inventory) (map[string]bool, error) {
	selects, err := inv.selector()
	if err != nil {
		return nil, err
	}
	selected := map[string]bool{}
	add := func(t metav1.Object) {
		if selects(t.GetName(), t.GetLabels()) {
			selected[t.GetName()] = true
		}
	}
	if key.Cluster {
		targets, err := c.clusterTargets.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			add(t)
		}
	} else {
		targets, err := c.targets.Targets(key.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			add(t)
		}
	}
	return selected, nil
}

func (c *Controller) sinkInventory(key plumbing.InventoryKey, meta *metav1.ObjectMeta) sink.Inventory {
	return sink.Inventory{Cluster: c.cfg.ClusterName, Kind: key.Kind(), Namespace: key.Namespace, Name: key.Name, UID: string(meta.UID)}
}
